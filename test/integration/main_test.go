// Package integration runs the product under real systemd in the ACL-like
// test host (test/aclhost): install.sh, the agent service, uninstall.sh.
package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// agentBinary is built once per test run, stamped like a release build;
// distDir holds it and any other build the tests make.
var agentBinary, distDir string

func TestMain(m *testing.M) {
	code := func() int {
		if os.Getenv("AKS_FLEX_NODE_E2E") != "1" {
			return m.Run() // every test skips through aclhost.RequireE2E
		}
		dir, err := os.MkdirTemp("", "aks-flex-node-integration-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		distDir = dir
		agentBinary = filepath.Join(dir, "aks-flex-node")
		if err := buildAgent(agentBinary, "v1.0.0-test"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func buildAgent(out, version string) error {
	return buildAgentWith(out, version, "", "")
}

// buildAgentWith builds the agent with build tags and extra -ldflags (the
// failpoints test builds).
func buildAgentWith(out, version, tags, ldflags string) error {
	args := []string{"build", "-trimpath", "-o", out,
		"-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=" + version + " " + ldflags}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "./cmd/aks-flex-node")...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build agent: %v\n%s", err, b)
	}
	return nil
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	sum, _, err := fsutil.FileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// testConfig is a valid config that points at loopback inside the host's
// private network: nothing answers there, so the agent waits, and no real
// endpoint is ever contacted.
func testConfig(t *testing.T, prefix string) []byte {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(repoRoot(), "internal/config/testdata/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	agent := map[string]any{"nodeName": "test-node", "machineReconcileInterval": "10s"}
	if prefix != "" {
		agent["hostPrefix"] = prefix
	}
	b, err := json.MarshalIndent(map[string]any{
		"azure": map[string]any{"bootstrapToken": map[string]any{"token": "abcdef.0123456789abcdef"}},
		"agent": agent,
		"node": map[string]any{"kubelet": map[string]any{
			"clusterFQDN": "127.0.0.1:6443",
			"caCertData":  base64.StdEncoding.EncodeToString(ca),
		}},
		// A worker image that is not there: without one, start would
		// take upstream's published image, and no test may reach its
		// registry. Tests that need an image set their own.
		"bootstrap": map[string]any{"ociImage": "oci-layout:///var/lib/aks-flex-node-test/no-worker-image:none"},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package preflight

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
)

// Mount table lines for fake hosts. Mount points are paths inside the
// fake root.
const (
	mRoot     = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw"
	mUsrRO    = "2 1 8:2 / /usr ro,relatime - ext4 /dev/sda2 ro"
	mCgroupV2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw"
)

const (
	testToken  = "abcdef.0123456789abcdef"
	testSecret = "0123456789abcdef"
	testNode   = "node-1"
)

// fakeHost is a temp root plus a proc dir describing it. The proc dir is
// outside the root so that "the root is unchanged" means what it says.
type fakeHost struct {
	t     *testing.T
	root  string
	proc  string
	cfg   map[string]any
	euid  int
	free  uint64
	frees []string // paths FreeBytes was asked about
	// fetch stands in for the identity endpoint (nil: the real one).
	fetch func(ctx context.Context, s identity.Spec) (identity.Token, error)
}

func newHost(t *testing.T) *fakeHost {
	t.Helper()
	h := &fakeHost{t: t, root: t.TempDir(), proc: t.TempDir(), euid: 0, free: 100 * GiB}
	for _, d := range []string{"usr/bin", "usr/lib/systemd", "opt", "var/lib", "var/log", "etc/systemd/system", "sys/fs/cgroup"} {
		h.mkdir(d)
	}
	h.file("etc/os-release", "ID=debian\nVERSION_ID=12\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
	h.exec("usr/lib/systemd/systemd")
	h.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	h.mounts(mRoot, mCgroupV2)
	h.procFile("1/comm", "systemd\n")
	h.procFile("swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
	h.procFile("modules", "overlay 151552 0 - Live 0x0000000000000000\nbr_netfilter 32768 0 - Live 0x0000000000000000\n")
	h.procFile("sys/kernel/osrelease", "6.8.0-test\n")
	h.cfg = map[string]any{
		"azure": map[string]any{"bootstrapToken": map[string]any{"token": testToken}},
		"agent": map[string]any{"nodeName": testNode},
		"node": map[string]any{"kubelet": map[string]any{
			"clusterFQDN": "127.0.0.1:1",
			"caCertData":  caData(newCA(t).certPEM),
		}},
	}
	return h
}

func (h *fakeHost) mkdir(rel string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Join(h.root, rel), 0o755); err != nil {
		h.t.Fatal(err)
	}
}

func writeAt(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func (h *fakeHost) file(rel, content string) {
	h.t.Helper()
	writeAt(h.t, filepath.Join(h.root, rel), content, 0o644)
}

func (h *fakeHost) exec(rel string) {
	h.t.Helper()
	writeAt(h.t, filepath.Join(h.root, rel), "#!/bin/sh\n", 0o755)
}

func (h *fakeHost) procFile(rel, content string) {
	h.t.Helper()
	writeAt(h.t, filepath.Join(h.proc, rel), content, 0o644)
}

func (h *fakeHost) rmProc(rel string) {
	h.t.Helper()
	if err := os.Remove(filepath.Join(h.proc, rel)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) mounts(lines ...string) {
	h.t.Helper()
	h.procFile("self/mountinfo", strings.Join(lines, "\n")+"\n")
}

// set assigns a config key by dotted path.
func (h *fakeHost) set(path string, v any) {
	m := h.cfg
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	if v == nil {
		delete(m, parts[len(parts)-1])
		return
	}
	m[parts[len(parts)-1]] = v
}

// configFile is where the fake host's config lives, as this process opens it.
func (h *fakeHost) configFile() string {
	return filepath.Join(h.root, "etc/aks-flex-node/config.json")
}

// env writes the config into the root and returns an Env for the host.
func (h *fakeHost) env() *Env {
	h.t.Helper()
	data, err := json.MarshalIndent(h.cfg, "", "  ")
	if err != nil {
		h.t.Fatal(err)
	}
	writeAt(h.t, h.configFile(), string(data), 0o600)
	c, err := config.Parse(h.configFile(), data)
	if err != nil {
		h.t.Fatal(err)
	}
	l, err := c.Layout(h.root, h.configFile())
	if err != nil {
		h.t.Fatal(err)
	}
	return &Env{
		Root: h.root, ProcDir: h.proc, Config: c, ConfigFile: h.configFile(), Layout: l,
		Geteuid:    func() int { return h.euid },
		FetchToken: h.fetch,
		FreeBytes: func(p string) (uint64, error) {
			h.frees = append(h.frees, p)
			return h.free, nil
		},
	}
}

// run runs the named default check.
func (h *fakeHost) run(name string) Result {
	h.t.Helper()
	return runNamed(h.t, h.env(), name)
}

func runNamed(t *testing.T, env *Env, name string) Result {
	t.Helper()
	for _, c := range Checks(env) {
		if c.Name() == name {
			r := c.Run(context.Background())
			t.Logf("%s: %s: %s (remedy: %s)", name, r.Severity, r.Message, r.Remedy)
			return r
		}
	}
	t.Fatalf("no check %q", name)
	return Result{}
}

func want(t *testing.T, r Result, sev Severity, contains ...string) {
	t.Helper()
	if r.Severity != sev {
		t.Errorf("severity %s, want %s: %s", r.Severity, sev, r.Message)
	}
	if sev != SeverityOK && r.Remedy == "" {
		t.Errorf("%s without a remedy: %s", sev, r.Message)
	}
	for _, s := range contains {
		if !strings.Contains(r.Message, s) && !strings.Contains(r.Remedy, s) {
			t.Errorf("result does not mention %q:\n  message: %s\n  remedy: %s", s, r.Message, r.Remedy)
		}
	}
}

type testCA struct {
	certPEM []byte
}

// newCA makes a self-signed CA that has signed nothing: the wrong CA for
// any server.
func newCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "wrong-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func caData(certPEM []byte) string { return base64.StdEncoding.EncodeToString(certPEM) }

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

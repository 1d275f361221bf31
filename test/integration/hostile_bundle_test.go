package integration

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/artifact"
)

// TestFIFOInBundle: a named pipe as a bundle's manifest.json or as a
// .sha256 sidecar hung `artifacts verify`, preflight and `start` for good
// (issue 13, defect 9). On the ACL-like host each returns at once with an
// error naming the file.
func TestFIFOInBundle(t *testing.T) {
	bundle := fakeBundle(t)
	h := installed(t, startConfig(t, "oci-layout:///root/images/none:none", "/root/bundle"))
	agent := aclPrefix + "/bin/aks-flex-node"
	sidecar := artifact.BundlePaths(fakeComponents, runtime.GOARCH)[artifact.Kubelet] + ".sha256"
	for _, rel := range []string{"manifest.json", sidecar} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			h.RunOK(t, "rm", "-rf", "/root/bundle")
			must(t, h.CopyIn(bundle, "/root/bundle", 0o755))
			fifo := "/root/bundle/" + rel
			must(t, os.Remove(h.Path(fifo)))
			must(t, syscall.Mkfifo(h.Path(fifo), 0o644))

			stdout, stderr, code := runBounded(t, h, time.Minute, agent, "artifacts", "verify", "--source", "/root/bundle")
			if code == 0 || !strings.Contains(stdout+stderr, fifo) || !strings.Contains(stdout+stderr, "not a regular file") {
				t.Errorf("artifacts verify: exit %d, want a failure naming %s:\n%s\n%s", code, fifo, stdout, stderr)
			}
			stdout, stderr, code = runBounded(t, h, 2*time.Minute, agent, "start", "--config", "/etc/aks-flex-node/config.json",
				"--ignore-preflight-errors=api-server-reachable,bootstrap-token,worker-image")
			if code == 0 || !strings.Contains(stdout+stderr, fifo) {
				t.Errorf("start: exit %d, want a refusal naming %s:\n%s\n%s", code, fifo, stdout, stderr)
			}
			// Ignoring the check does not get past the stage, which
			// verifies again.
			stdout, stderr, code = runBounded(t, h, 2*time.Minute, agent, "start", "--config", "/etc/aks-flex-node/config.json",
				"--ignore-preflight-errors=api-server-reachable,bootstrap-token,artifact-sources,worker-image")
			if code == 0 || !strings.Contains(stdout+stderr, fifo) || !strings.Contains(stdout+stderr, "stage-node-components") {
				t.Errorf("start ignoring artifact-sources: exit %d, want a failure at stage-node-components naming %s:\n%s\n%s", code, fifo, stdout, stderr)
			}
		})
	}
}

package integration

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// TestStartRefusesWithoutAgentBinaryOnACLHost: start installs the agent
// service (seeding the upgrade slots from <binDir>/aks-flex-node) after the
// node has joined, so a host where that would fail, here `start` run from a
// download dir with nothing at the layout's agentBinary, is refused before
// anything is touched, naming the path, even with every preflight error
// ignored.
func TestStartRefusesWithoutAgentBinaryOnACLHost(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, aclPrefix))
	before := snapshot(t, h)
	stdout, stderr, err := h.Run(context.Background(), "/root/dist/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=all")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("start without an agent binary at the layout's path: %v\n%s\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "no agent binary at "+aclPrefix+"/bin/aks-flex-node") || !strings.Contains(stderr, "refused before touching the host") {
		t.Errorf("refusal does not name the path:\n%s", stderr)
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused start wrote:\n%s", strings.Join(d, "\n"))
	}
}

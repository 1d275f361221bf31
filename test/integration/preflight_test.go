package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

type preflightReport struct {
	Status string `json:"status"`
	Checks []struct {
		Name     string `json:"name"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Remedy   string `json:"remedy"`
	} `json:"checks"`
}

func (r preflightReport) check(t *testing.T, name string) (severity, message, remedy string) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Severity, c.Message, c.Remedy
		}
	}
	t.Fatalf("no check %q in report", name)
	return
}

// runPreflight runs preflight inside the host. The API server and token
// checks fail by design (nothing listens on the host's loopback), and
// worker-image does when the config names no worker image (testConfig);
// they are ignored so the exit code reflects the checks under test.
func runPreflight(t *testing.T, h *aclhost.Host, extra ...string) (preflightReport, int, string) {
	t.Helper()
	args := append([]string{"/root/dist/aks-flex-node", "preflight", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=api-server-reachable,bootstrap-token,worker-image", "--output", "json"}, extra...)
	stdout, stderr, err := h.Run(context.Background(), args...)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("preflight: %v", err)
	}
	var r preflightReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("preflight JSON: %v\n%s\n%s", err, stdout, stderr)
	}
	return r, code, stdout
}

func TestPreflightOnACLHost(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, ""))
	before := snapshot(t, h)
	beforeRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)

	// Empty prefix on a read-only /usr: the layout error, exit 1.
	r, code, out := runPreflight(t, h)
	sev, msg, remedy := r.check(t, "host-layout")
	if code != 1 || sev != "error" {
		t.Fatalf("empty prefix: exit %d, host-layout %s:\n%s", code, sev, out)
	}
	for _, want := range []string{"/usr/local/bin", "/usr/local/lib/aks-flex-node", "/usr", "read-only"} {
		if !strings.Contains(msg, want) {
			t.Errorf("host-layout message does not name %q: %s", want, msg)
		}
	}
	if !strings.Contains(remedy, "agent.hostPrefix") || !strings.Contains(remedy, "/opt/aks-flex-node") {
		t.Errorf("host-layout remedy: %s", remedy)
	}
	// No package manager, all tools present: reported, not an error.
	if sev, msg, _ := r.check(t, "host-packages"); sev != "ok" || !strings.Contains(msg, "no") {
		t.Errorf("host-packages on a host without a package manager: %s %s", sev, msg)
	}
	// The text form says it the kubeadm way.
	text, _, _ := h.Run(context.Background(), "/root/dist/aks-flex-node", "preflight", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=api-server-reachable,bootstrap-token")
	if !strings.Contains(text, "[preflight] Running preflight checks") || !strings.Contains(text, "[ERROR host-layout]") {
		t.Errorf("text output:\n%s", text)
	}

	// With the prefix: no layout error, and the run passes.
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", testConfig(t, "/opt/aks-flex-node"), 0o600))
	before = snapshot(t, h) // the config changed on purpose
	r, code, out = runPreflight(t, h)
	if sev, msg, _ := r.check(t, "host-layout"); sev != "ok" {
		t.Errorf("prefix /opt/aks-flex-node: host-layout %s: %s", sev, msg)
	}
	if code != 0 {
		t.Errorf("prefix /opt/aks-flex-node: exit %d:\n%s", code, out)
	}

	// Preflight changed nothing.
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("preflight changed the host:\n%s", strings.Join(d, "\n"))
	}
	afterRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)
	if d := aclhost.Diff(beforeRun, afterRun); len(d) > 0 {
		t.Errorf("preflight changed /run or a temp dir:\n%s", strings.Join(d, "\n"))
	}
}

func TestPreflightMissingToolOnACLHost(t *testing.T) {
	aclhost.RequireE2E(t)
	// /usr is read-only on ACL: hide a required tool the way a stripped
	// image would lack it, by binding a non-executable file over it.
	stub := filepath.Join(t.TempDir(), "not-nsenter")
	must(t, os.WriteFile(stub, nil, 0o644))
	h := aclhost.MustStart(t, aclhost.Options{Variant: aclhost.ACL, Name: "pf", ExtraArgs: []string{"--bind-ro=" + stub + ":/usr/bin/nsenter"}})
	must(t, h.CopyIn(agentBinary, "/root/dist/aks-flex-node", 0o755))
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", testConfig(t, "/opt/aks-flex-node"), 0o600))
	r, code, out := runPreflight(t, h)
	sev, msg, _ := r.check(t, "host-packages")
	if code != 1 || sev != "error" || !strings.Contains(msg, "nsenter") {
		t.Fatalf("missing nsenter: exit %d, host-packages %s %q:\n%s", code, sev, msg, out)
	}
}

func TestStartRefusesEmptyPrefixOnACLHost(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, ""))
	before := snapshot(t, h)
	beforeRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)
	stdout, stderr, err := h.Run(context.Background(), "/root/dist/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=api-server-reachable,bootstrap-token")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("start with an empty prefix on a read-only /usr: %v\n%s\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "[ERROR host-layout]") || !strings.Contains(stderr, "refused by preflight") {
		t.Errorf("refusal does not say why:\n%s\n%s", stdout, stderr)
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused start wrote:\n%s", strings.Join(d, "\n"))
	}
	afterRun, err := h.Snapshot("/run", "/tmp", "/var/tmp")
	must(t, err)
	if d := aclhost.Diff(beforeRun, afterRun); len(d) > 0 {
		t.Errorf("a refused start changed /run or a temp dir:\n%s", strings.Join(d, "\n"))
	}
	if out, _, _ := h.Run(context.Background(), "machinectl", "list", "--no-legend"); strings.TrimSpace(out) != "" {
		t.Errorf("a machine is running after a refused start: %s", out)
	}
}

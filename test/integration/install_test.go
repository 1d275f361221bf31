package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// watched is where a node agent could write; tree diffs cover all of it.
var watched = []string{"/etc", "/var", "/opt", "/usr", "/root/.cache"}

// prepare boots a host and stages the binary, its checksum, the scripts
// and (when cfg is non-nil) the config, all outside /usr.
func prepare(t *testing.T, v aclhost.Variant, cfg []byte) *aclhost.Host {
	t.Helper()
	aclhost.RequireE2E(t)
	h := aclhost.MustStart(t, aclhost.Options{Variant: v, Name: "inst"})
	must(t, h.CopyIn(agentBinary, "/root/dist/aks-flex-node", 0o755))
	must(t, h.WriteFile("/root/dist/aks-flex-node.sha256", []byte(fileSHA256(t, agentBinary)+"  aks-flex-node\n"), 0o644))
	for _, s := range []string{"install.sh", "uninstall.sh"} {
		must(t, h.CopyIn(filepath.Join(repoRoot(), "scripts", s), "/root/dist/"+s, 0o755))
	}
	if cfg != nil {
		must(t, h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600))
	}
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, h *aclhost.Host) aclhost.Tree {
	t.Helper()
	tr, err := h.Snapshot(watched...)
	must(t, err)
	return tr
}

func assertNothingUnderUsr(t *testing.T, h *aclhost.Host) {
	t.Helper()
	changes, err := h.ChangesUnder("/usr")
	must(t, err)
	for _, c := range changes {
		t.Errorf("written under /usr: %s", c)
	}
}

func waitActive(t *testing.T, h *aclhost.Host, unit string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, _ := h.Run(context.Background(), "systemctl", "is-active", unit)
		if strings.TrimSpace(out) == "active" {
			return
		}
		if time.Now().After(deadline) {
			status, _, _ := h.Run(context.Background(), "systemctl", "status", "--no-pager", unit)
			t.Fatalf("%s not active after 30s (%s):\n%s", unit, strings.TrimSpace(out), status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestACLInstallWithPrefix(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, "/opt/aks-flex-node"))
	before := snapshot(t, h)

	var report struct {
		Family         string `json:"family"`
		UsrReadOnly    bool   `json:"usrReadOnly"`
		PackageManager string `json:"packageManager"`
	}
	must(t, json.Unmarshal([]byte(h.RunOK(t, "/root/dist/aks-flex-node", "host", "inspect", "--output", "json")), &report))
	if report.Family != "acl" || !report.UsrReadOnly || report.PackageManager != "" {
		t.Errorf("host inspect on the ACL-like host: %+v", report)
	}

	start := time.Now()
	out := h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	t.Logf("install.sh took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	if !strings.Contains(out, "Azure Container Linux") || !strings.Contains(out, "read-only /usr") {
		t.Errorf("install.sh did not report the host it found:\n%s", out)
	}
	if fi, err := os.Stat(h.Path("/opt/aks-flex-node/bin/aks-flex-node")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("binary not installed under the prefix: %v %v", fi, err)
	}
	assertNothingUnderUsr(t, h)

	// Re-running the installer is harmless.
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")

	start = time.Now()
	h.RunOK(t, "/opt/aks-flex-node/bin/aks-flex-node", "install-service", "--config", "/etc/aks-flex-node/config.json")
	waitActive(t, h, "aks-flex-node-agent.service")
	t.Logf("install-service to active: %v", time.Since(start).Round(time.Millisecond))
	exec := h.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", "aks-flex-node-agent.service")
	if !strings.Contains(exec, "path=/opt/aks-flex-node/lib/current") {
		t.Errorf("ExecStart does not name the prefix's current slot: %s", exec)
	}
	// install-service seeded the slots and made the binary on PATH a link
	// to the current slot.
	if l := h.RunOK(t, "readlink", "/opt/aks-flex-node/bin/aks-flex-node"); strings.TrimSpace(l) != "/opt/aks-flex-node/lib/current" {
		t.Errorf("agent binary is not a link to the current slot: %q", l)
	}
	for _, unit := range []string{"aks-flex-node-recovery.service", "aks-flex-node-recovery.timer"} {
		h.RunOK(t, "systemd-analyze", "verify", "/etc/systemd/system/"+unit)
	}
	h.RunOK(t, "systemd-analyze", "verify", "/etc/systemd/system/aks-flex-node-agent.service")

	// The agent must wait for the unreachable API server, not crash-loop.
	time.Sleep(3 * time.Second)
	if n := strings.TrimSpace(h.RunOK(t, "systemctl", "show", "-p", "NRestarts", "--value", "aks-flex-node-agent.service")); n != "0" {
		t.Errorf("agent restarted %s times while waiting", n)
	}
	waitActive(t, h, "aks-flex-node-agent.service")
	journal := h.RunOK(t, "journalctl", "-u", "aks-flex-node-agent.service", "--no-pager")
	if !strings.Contains(journal, "API server https://127.0.0.1:6443") {
		t.Errorf("agent does not log what it waits for:\n%s", journal)
	}
	// install-service is idempotent and restarts nothing.
	pid := h.RunOK(t, "systemctl", "show", "-p", "MainPID", "--value", "aks-flex-node-agent.service")
	if out := h.RunOK(t, "/opt/aks-flex-node/bin/aks-flex-node", "install-service"); !strings.Contains(out, "changed=false") {
		t.Errorf("second install-service changed something: %s", out)
	}
	if pid2 := h.RunOK(t, "systemctl", "show", "-p", "MainPID", "--value", "aks-flex-node-agent.service"); pid2 != pid {
		t.Errorf("second install-service restarted the agent (%s -> %s)", pid, pid2)
	}
	assertNothingUnderUsr(t, h)

	// SIGTERM stops it cleanly (exit 0, not failed).
	h.RunOK(t, "systemctl", "stop", "aks-flex-node-agent.service")
	if r := strings.TrimSpace(h.RunOK(t, "systemctl", "show", "-p", "Result", "--value", "aks-flex-node-agent.service")); r != "success" {
		t.Errorf("agent stop result %q, want success", r)
	}

	out = h.RunOK(t, "/root/dist/uninstall.sh")
	t.Logf("uninstall.sh:\n%s", out)
	after := snapshot(t, h)
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("uninstall left the tree changed:\n%s", strings.Join(d, "\n"))
	}
	assertNothingUnderUsr(t, h)
}

func TestACLInstallWithoutPrefixRefuses(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, ""))
	before := snapshot(t, h)
	stdout, stderr, err := h.Run(context.Background(), "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	if err == nil {
		t.Fatalf("install.sh succeeded on a read-only /usr:\n%s", stdout)
	}
	for _, want := range []string{"/usr/local/bin", "read-only", "agent.hostPrefix", "/opt/aks-flex-node"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal does not mention %q:\n%s", want, stderr)
		}
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("install.sh wrote before refusing:\n%s", strings.Join(d, "\n"))
	}
}

func TestInstallRefusals(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, "/opt/aks-flex-node"))
	before := snapshot(t, h)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"checksum mismatch", []string{"--sha256", strings.Repeat("0", 64)}, "checksum mismatch"},
		{"install dir not a bin dir", []string{"--install-dir", "/opt/aks-flex-node"}, "not a layout bin dir"},
		{"install dir differs from config", []string{"--install-dir", "/opt/other/bin"}, "differs from the bin dir of the layout"},
		{"missing config", []string{"--config", "/etc/nope.json"}, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node"}, tc.args...)
			_, stderr, err := h.Run(context.Background(), args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Fatalf("want refusal containing %q, got err=%v:\n%s", tc.want, err, stderr)
			}
		})
	}
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused install wrote:\n%s", strings.Join(d, "\n"))
	}
}

func TestDebianClassicInstall(t *testing.T) {
	h := prepare(t, aclhost.Debian, testConfig(t, ""))
	before := snapshot(t, h)
	out := h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	if !strings.Contains(out, "installed /usr/local/bin/aks-flex-node") {
		t.Fatalf("classic install:\n%s", out)
	}
	h.RunOK(t, "/usr/local/bin/aks-flex-node", "install-service")
	waitActive(t, h, "aks-flex-node-agent.service")
	exec := h.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", "aks-flex-node-agent.service")
	if !strings.Contains(exec, "path=/usr/local/lib/aks-flex-node/current") {
		t.Errorf("ExecStart: %s", exec)
	}
	// install.sh again on a seeded host: the new file replaces the link
	// (never writing through it into a slot) and install-service adopts it.
	if out := h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node"); !strings.Contains(out, "was a link to the current upgrade slot") {
		t.Errorf("install.sh on a seeded host does not say what happens next:\n%s", out)
	}
	if out := h.RunOK(t, "/usr/local/bin/aks-flex-node", "install-service"); !strings.Contains(out, "changed=true") {
		t.Errorf("install-service after a re-install: %s", out)
	}
	if l := h.RunOK(t, "readlink", "/usr/local/bin/aks-flex-node"); strings.TrimSpace(l) != "/usr/local/lib/aks-flex-node/current" {
		t.Errorf("agent binary link not restored: %q", l)
	}
	waitActive(t, h, "aks-flex-node-agent.service")
	h.RunOK(t, "/root/dist/uninstall.sh")
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("uninstall left the tree changed:\n%s", strings.Join(d, "\n"))
	}
}

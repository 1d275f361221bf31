package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/supportbundle"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// TestFleetEvidenceFromARealJournal: the evidence a failed rollout node
// attaches is read from journal files that a real journald wrote (in an
// ACL-like host, for units named kubelet and containerd), through the
// stopped-machine path (the failed side after a rollback is stopped):
// bounded in lines and bytes, the newest lines kept, and every secret
// the journals held redacted by the support bundle's redactor, the host
// config's literal bootstrap token included.
func TestFleetEvidenceFromARealJournal(t *testing.T) {
	aclhost.RequireE2E(t)
	h := aclhost.MustStart(t, aclhost.Options{Name: "evid"})
	const tokenSecret = "0123456789abcdef"
	// Persistent storage, so the files are there to read from outside.
	h.RunOK(t, "bash", "-c", `set -euo pipefail
mkdir -p /var/log/journal
systemd-tmpfiles --create --prefix /var/log/journal
journalctl --flush
systemd-run --quiet --wait --collect --unit=kubelet.service sh -c '
  for i in $(seq 1 300); do echo "kubelet line $i: pod sync ok"; done
  echo "E1206 bootstrap: token abcdef.`+tokenSecret+` rejected"
  echo "E1206 exec: Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJub2RlIn0.c2lnbmF0dXJl"
  echo "E1206 joining with the literal `+tokenSecret+` again"
  echo "F1206 kubelet: last words"'
systemd-run --quiet --wait --collect --unit=containerd.service sh -c '
  for i in $(seq 1 100); do printf "containerd line %03d %0500d\n" "$i" 0; done
  echo "level=error msg=\"pull failed\" password=hunter2hunter2"'
journalctl --sync
journalctl --flush`)

	// The journal files as the build machine sees them, put where a
	// stopped machine kube2's journal is on a host root, with a config
	// whose bootstrap token the redactor must hide wherever it appears.
	root := t.TempDir()
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(l.OnRoot(l.MachineDir("kube2")), "var", "log")
	if err := os.MkdirAll(journal, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", h.Path("/var/log/journal"), journal).CombinedOutput(); err != nil {
		t.Fatalf("copy the journal: %v\n%s", err, out)
	}
	cfg := l.OnRoot(l.ConfigFile())
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(`{"azure":{"bootstrapToken":{"token":"abcdef.`+tokenSecret+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := fleet.Evidence{Node: h.Name(), Rollout: "edge-b", Generation: 2, Step: "switch", Reason: "RolledBack",
		Error: "kubelet on kube2 exited", Side: "kube2", At: time.Now()}
	e.CollectJournals(ctx, func(ctx context.Context, side, unit string, lines int, maxBytes int64) ([]byte, int, error) {
		return supportbundle.JournalTail(ctx, supportbundle.Options{Layout: l}, side, unit, lines, maxBytes)
	})
	k, c := e.Journals[0], e.Journals[1]
	if k.Error != "" || c.Error != "" {
		t.Fatalf("journals: %q, %q", k.Error, c.Error)
	}
	kt, ct := strings.Join(k.Lines, "\n"), strings.Join(c.Lines, "\n")
	t.Logf("kubelet: %d lines, %d bytes, %d redactions, cut %v; containerd: %d lines, %d bytes, %d redactions, cut %v",
		len(k.Lines), len(kt), k.Redactions, k.Cut, len(c.Lines), len(ct), c.Redactions, c.Cut)
	// The newest lines: the unit's last words, then systemd's own line
	// about the unit (journalctl -u shows both).
	if len(k.Lines) != fleet.EvidenceLines || !strings.Contains(strings.Join(k.Lines[len(k.Lines)-2:], "\n"), "F1206 kubelet: last words") {
		t.Errorf("kubelet: %d lines ending %q, want the last %d", len(k.Lines), k.Lines[len(k.Lines)-1], fleet.EvidenceLines)
	}
	if len(ct) > fleet.EvidenceJournalBytes || !c.Cut || !strings.Contains(c.Lines[len(c.Lines)-1], "pull failed") || strings.Contains(ct, "line 001 ") {
		t.Errorf("containerd: %d bytes (bound %d), cut %v, last %q", len(ct), fleet.EvidenceJournalBytes, c.Cut, c.Lines[len(c.Lines)-1])
	}
	for _, secret := range []string{tokenSecret, "eyJhbGciOiJSUzI1NiJ9", "hunter2hunter2"} {
		if strings.Contains(kt+ct, secret) {
			t.Errorf("secret %q left in the evidence", secret)
		}
	}
	if k.Redactions < 3 || c.Redactions < 1 || !strings.Contains(kt, "token "+supportbundle.Redacted+" rejected") || !strings.Contains(kt, "literal "+supportbundle.Redacted+" again") {
		t.Errorf("redactions: kubelet %d, containerd %d:\n%s", k.Redactions, c.Redactions, kt)
	}
	v, err := e.Annotation()
	if err != nil || len(v) > fleet.MaxEvidenceBytes {
		t.Errorf("annotation: %d bytes, %v", len(v), err)
	}
	if m := e.Message(fleet.MaxEventMessage); len(m) > fleet.MaxEventMessage || !strings.Contains(m, "last words") {
		t.Errorf("event message (%d bytes):\n%s", len(m), m)
	}
}

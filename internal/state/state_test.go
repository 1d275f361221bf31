package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAppliedRoundTripAndChecksum(t *testing.T) {
	dir := t.TempDir()
	if a, err := OpenDir(dir).Applied(); a != nil || err != nil {
		t.Fatalf("empty dir: %v %v", a, err)
	}
	a := Applied{ConfigFile: "/etc/aks-flex-node/config.json", ConfigSHA256: "ab", Prefix: "/opt/aks-flex-node", NodeName: "n", Machine: "kube1", AppliedAt: time.Unix(100, 0).UTC()}
	if changed, err := OpenDir(dir).SaveApplied(a); err != nil || !changed {
		t.Fatalf("save: %v %v", changed, err)
	}
	for _, f := range []string{AppliedFile, AppliedFile + ".sha256"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
	got, err := OpenDir(dir).Applied()
	if err != nil || got.Prefix != a.Prefix || got.SchemaVersion != 1 {
		t.Fatalf("load: %+v %v", got, err)
	}
	// Same state, later time: nothing rewritten.
	a.AppliedAt = time.Unix(200, 0).UTC()
	if changed, err := OpenDir(dir).SaveApplied(a); err != nil || changed {
		t.Fatalf("converged save rewrote: %v %v", changed, err)
	}
	// Tampering is detected.
	p := filepath.Join(dir, AppliedFile)
	data, _ := os.ReadFile(p)
	data[10] ^= 1
	_ = os.WriteFile(p, data, 0o600)
	if _, err := OpenDir(dir).Applied(); !errors.Is(err, ErrChecksum) {
		t.Fatalf("tampered: %v", err)
	}
}

func TestTrackerDeepestFirst(t *testing.T) {
	dir := t.TempDir()
	tr, err := OpenDir(dir).Tracker()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Add("/a", "/a/b/c", "/a/b"); err != nil {
		t.Fatal(err)
	}
	tr2, err := OpenDir(dir).Tracker()
	if err != nil {
		t.Fatal(err)
	}
	if got := tr2.List(); len(got) != 3 || got[0] != "/a/b/c" || got[2] != "/a" {
		t.Fatalf("list %v", got)
	}
}

// TestRecordedConfigDigest reads the digest SaveApplied records, and only
// that: a file whose other fields do not parse still names its config.
func TestRecordedConfigDigest(t *testing.T) {
	dir := t.TempDir()
	sum := ConfigDigest([]byte(`{"agent": {}}`))
	if _, err := OpenDir(dir).SaveApplied(Applied{ConfigSHA256: sum}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, AppliedFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := RecordedConfigDigest(data); err != nil || got != sum {
		t.Errorf("recorded %q, %v; want %q", got, err, sum)
	}
	if got, err := RecordedConfigDigest([]byte(`{"configSHA256": "ab", "appliedAt": 7}`)); err != nil || got != "ab" {
		t.Errorf("damaged file: %q, %v", got, err)
	}
	if _, err := RecordedConfigDigest([]byte(`not json`)); err == nil {
		t.Error("not json: no error")
	}
}

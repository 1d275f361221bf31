package state

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/renameio/v2"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// TestStoreOpensTheLayoutsStateDir: the store reads and writes the state
// dir of the layout under its root, and nowhere else.
func TestStoreOpensTheLayoutsStateDir(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	s := Open(l)
	if want := filepath.Join(root, l.StateDir()); s.Dir() != want {
		t.Fatalf("Dir() = %s, want %s", s.Dir(), want)
	}
	if err := os.MkdirAll(s.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveApplied(Applied{NodeName: "n1", Machine: layout.MachineGreen, KubernetesVersion: "1.35.0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, l.StateDir(), AppliedFile)); err != nil {
		t.Fatalf("applied state not in the layout's state dir: %v", err)
	}
	a, err := OpenDir(s.Dir()).Applied()
	if err != nil || a == nil || a.NodeName != "n1" {
		t.Fatalf("Applied() = %+v, %v", a, err)
	}
	// No sides record yet: the pair is derived from the applied state.
	sides, err := s.Sides()
	if err != nil || sides == nil || sides.Active != layout.MachineGreen || sides.Machines[layout.MachineGreen].KubernetesVersion != "1.35.0" {
		t.Fatalf("Sides() = %+v, %v", sides, err)
	}
	sides.Active = layout.MachineBlue
	if err := s.SaveSides(*sides); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Sides(); err != nil || got.Active != layout.MachineBlue {
		t.Fatalf("Sides() after save = %+v, %v", got, err)
	}
}

// TestActiveMachine is the one rule: the machine the applied state names;
// the first side when there is no state, it names none, or it cannot be
// read.
func TestActiveMachine(t *testing.T) {
	var none *Applied
	if got := none.ActiveMachine(); got != layout.MachineBlue {
		t.Errorf("no state: %s, want %s", got, layout.MachineBlue)
	}
	if got := (&Applied{}).ActiveMachine(); got != layout.MachineBlue {
		t.Errorf("state without a machine: %s, want %s", got, layout.MachineBlue)
	}
	if got := (&Applied{Machine: layout.MachineGreen}).ActiveMachine(); got != layout.MachineGreen {
		t.Errorf("state naming %s: %s", layout.MachineGreen, got)
	}

	s := OpenDir(t.TempDir())
	if got := s.ActiveMachine(); got != layout.MachineBlue {
		t.Errorf("empty state dir: %s, want %s", got, layout.MachineBlue)
	}
	if _, err := s.SaveApplied(Applied{Machine: layout.MachineGreen}); err != nil {
		t.Fatal(err)
	}
	if got := s.ActiveMachine(); got != layout.MachineGreen {
		t.Errorf("after a repave to %s: %s", layout.MachineGreen, got)
	}
	// A torn state (sidecar gone) is not trusted: the first side.
	if err := os.Remove(filepath.Join(s.Dir(), AppliedFile+".sha256")); err != nil {
		t.Fatal(err)
	}
	if got := s.ActiveMachine(); got != layout.MachineBlue {
		t.Errorf("unreadable state: %s, want %s", got, layout.MachineBlue)
	}
}

// A write cut short leaves renameio's pending file beside the store's
// file; RemovePending removes those of every file the store writes and
// nothing else: the files themselves, and another writer's pending
// files, stay.
func TestRemovePendingRemovesCrashedWritesOfTheStoresFiles(t *testing.T) {
	dir := t.TempDir()
	s := OpenDir(dir)
	if _, err := s.SaveApplied(Applied{NodeName: "n1", Machine: "kube1"}); err != nil {
		t.Fatal(err)
	}
	tr, err := s.Tracker()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Add("/etc/x"); err != nil {
		t.Fatal(err)
	}
	// What a writer killed before its rename leaves: a pending file made
	// by the same library the store writes with (in the file's own dir,
	// as fsutil makes them), never closed.
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, name := range []string{AppliedFile, AppliedFile + ".sha256", TrackerFile, SidesFile, RepairsFile, "rollout.json"} {
		f, err := renameio.NewPendingFile(name, renameio.WithRoot(root))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("half")); err != nil {
			t.Fatal(err)
		}
		_ = f.File.Close() // the process died: no rename, no cleanup
	}
	if err := s.RemovePending(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	if len(left) != 4 || !strings.HasPrefix(left[0], ".rollout.json") || !slices.Equal(left[1:], []string{TrackerFile, AppliedFile, AppliedFile + ".sha256"}) {
		t.Fatalf("left in the state dir: %q, want the store's three files and the other writer's pending file", left)
	}
	if a, err := s.Applied(); err != nil || a.NodeName != "n1" {
		t.Fatalf("the applied state after RemovePending: %+v, %v", a, err)
	}
	if err := OpenDir(filepath.Join(dir, "absent")).RemovePending(); err != nil {
		t.Fatalf("a store without a dir: %v", err)
	}
}

package logfile

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The file rotates before it would pass its size, keeps the newest lines
// in agent.log, at most keep older files, all 0600.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.log")
	w := New(path, 100, 2)
	defer w.Close()
	for i := 0; i < 20; i++ {
		if _, err := fmt.Fprintf(w, "line %02d %s\n", i, strings.Repeat("x", 20)); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, _ := e.Info()
		if fi.Size() > 100 {
			t.Errorf("%s is %d bytes, over 100", e.Name(), fi.Size())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", e.Name(), fi.Mode())
		}
	}
	if strings.Join(names, ",") != "agent.log,agent.log.1,agent.log.2" {
		t.Fatalf("files %v", names)
	}
	cur, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(cur), "line 19 "+strings.Repeat("x", 20)+"\n") {
		t.Errorf("agent.log does not end with the last line:\n%s", cur)
	}
	old, _ := os.ReadFile(path + ".1")
	if !strings.Contains(string(old), "line 1") {
		t.Errorf("agent.log.1 does not hold the lines before:\n%s", old)
	}
}

// Without its directory the writer drops lines and creates nothing.
func TestNoDirectoryNoFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	w := New(filepath.Join(dir, "agent.log"), 0, 0)
	if n, err := w.Write([]byte("x\n")); err != nil || n != 2 {
		t.Fatalf("write without a dir: %d %v", n, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the writer created its dir: %v", err)
	}
}

// A link in the file's place is refused, not followed.
func TestRefusesLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, nil, 0o600)
	os.Symlink(target, filepath.Join(dir, "agent.log"))
	w := New(filepath.Join(dir, "agent.log"), 0, 0)
	if _, err := w.Write([]byte("x\n")); err == nil {
		t.Fatal("wrote through a link")
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Fatal("the link's target was written")
	}
}

// Tee writes each record to the journal's handler (no time there, as
// under systemd) and to the file with its time.
func TestTee(t *testing.T) {
	dir := t.TempDir()
	w := New(filepath.Join(dir, "agent.log"), 0, 0)
	var journal bytes.Buffer
	noTime := func(g []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(Tee(slog.NewTextHandler(&journal, &slog.HandlerOptions{ReplaceAttr: noTime}), w, slog.LevelInfo)).With("loop", "keep-machine")
	log.Info("machine started", "machine", "kube1")
	log.Debug("not at info")
	w.Close()
	file, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
	if journal.String() != "level=INFO msg=\"machine started\" loop=keep-machine machine=kube1\n" {
		t.Errorf("journal: %q", journal.String())
	}
	if !strings.HasPrefix(string(file), "time=") || !strings.Contains(string(file), `msg="machine started" loop=keep-machine machine=kube1`) || strings.Contains(string(file), "not at info") {
		t.Errorf("file: %q", file)
	}
}

// Issue 26 item 11: an agent.log (and rotated files) left 0644 by an
// older agent or an admin is made 0600 when the agent opens it, as the
// README says: logs can name what a secret was for.
func TestExistingAgentLog0644Becomes0600(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.log")
	for _, p := range []string{path, path + ".1"} {
		if err := os.WriteFile(p, []byte("old line\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w := New(path, 1<<20, 2)
	defer w.Close()
	if _, err := w.Write([]byte("new line\n")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o after the agent opened its log, want 0600", p, fi.Mode().Perm())
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "old line\nnew line\n" {
		t.Errorf("agent.log = %q: the existing lines must stay", b)
	}
}

package fsutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRunFreshWaitsOutTextFileBusy holds a write descriptor on a script,
// which makes exec fail with ETXTBSY exactly as a concurrently forked child
// does, and releases it shortly after.
func TestRunFreshWaitsOutTextFileBusy(t *testing.T) {
	script := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	hold := func() *os.File {
		f, err := os.OpenFile(script, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	f := hold()
	if err := exec.Command(script).Run(); !errors.Is(err, syscall.ETXTBSY) {
		f.Close()
		t.Fatalf("exec while a write descriptor is open = %v, want ETXTBSY (the premise of RunFresh)", err)
	}
	go func(f *os.File) { time.Sleep(50 * time.Millisecond); f.Close() }(f)
	if err := RunFresh(context.Background(), func() *exec.Cmd { return exec.Command(script) }); err != nil {
		t.Fatalf("RunFresh: %v", err)
	}

	// A file that stays busy still fails, and says why.
	busy := hold()
	defer busy.Close()
	start := time.Now()
	err := RunFresh(context.Background(), func() *exec.Cmd { return exec.Command(script) })
	if !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("RunFresh on a file kept open for writing = %v, want ETXTBSY", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("RunFresh gave up after %v; it should be bounded well under a second or two", d)
	}
}

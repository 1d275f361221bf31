package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// TestReadFile: a FIFO or a directory in the config's place is refused
// at once, as fsutil.OpenRegular refuses it; a file over the limit is
// invalid input naming the limit; a regular file is read.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := ReadFile(p); !errors.Is(err, fsutil.ErrNotRegular) || !strings.Contains(err.Error(), p+": not a regular file") {
			t.Errorf("%s: %v", p, err)
		}
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, MaxDocumentBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	var inv *InvalidError
	if _, err := ReadFile(big); !errors.As(err, &inv) {
		t.Errorf("over the limit: %v, want an *InvalidError", err)
	}
	ok := filepath.Join(dir, "ok.json")
	if err := os.WriteFile(ok, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(ok); err != nil || string(data) != "{}" {
		t.Errorf("regular file: %q %v", data, err)
	}
}

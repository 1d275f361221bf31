package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 26 item 4: `config migrate --output` over an existing 0644 file
// must not leave a client secret world-readable: renameio copies an
// existing file's mode unless told otherwise.
func TestConfigMigrateOutputSecretIs0600OverExisting0644(t *testing.T) {
	out := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(out, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	_, stderr, code := run(t, "config", "migrate", "--from", "../../testdata/upstream/service-principal.json", "--output", out)
	if code == 1 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("%s holds a client secret and has mode %04o over an existing 0644 file, want 0600", out, got)
	}
}

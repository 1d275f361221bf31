package swap

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const fstab = `# /etc/fstab
UUID=abc / ext4 defaults 0 1
/swapfile none swap sw 0 0
# /old-swap none swap sw 0 0
/dev/sdb2	none	swap	defaults,noauto	0 0
/dev/sdb3 none swap
`

// Start comments exactly the swap lines that boot with swap on; reset
// puts the file back byte for byte, mode included; both are idempotent.
func TestCommentAndRestoreFstab(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, Fstab)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(fstab), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := CommentFstab(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/swapfile none swap sw 0 0", "/dev/sdb3 none swap"}; !slices.Equal(got, want) {
		t.Errorf("commented %q, want %q", got, want)
	}
	data, _ := os.ReadFile(p)
	want := "# /etc/fstab\nUUID=abc / ext4 defaults 0 1\n" + Marker + "/swapfile none swap sw 0 0\n# /old-swap none swap sw 0 0\n/dev/sdb2\tnone\tswap\tdefaults,noauto\t0 0\n" + Marker + "/dev/sdb3 none swap\n"
	if string(data) != want {
		t.Errorf("fstab after start:\n%s\nwant:\n%s", data, want)
	}
	if again, err := CommentFstab(root); err != nil || len(again) != 0 {
		t.Errorf("second run commented %q (%v)", again, err)
	}
	n, err := RestoreFstab(root)
	if err != nil || n != 2 {
		t.Fatalf("restored %d (%v), want 2", n, err)
	}
	data, _ = os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(data) != fstab || fi.Mode().Perm() != 0o640 {
		t.Errorf("fstab after reset (%v):\n%s", fi.Mode().Perm(), data)
	}
	if n, err := RestoreFstab(root); err != nil || n != 0 {
		t.Errorf("second restore: %d %v", n, err)
	}
}

func TestNoFstab(t *testing.T) {
	if got, err := CommentFstab(t.TempDir()); err != nil || got != nil {
		t.Errorf("%q %v", got, err)
	}
	if n, err := RestoreFstab(t.TempDir()); err != nil || n != 0 {
		t.Errorf("%d %v", n, err)
	}
}

func TestUnitsAndRecord(t *testing.T) {
	out := []byte("swapfile.swap loaded active active /swapfile\n● dev-sdb3.swap loaded failed failed /dev/sdb3\nold.swap masked inactive dead old.swap\n")
	units := Units(out)
	if want := []string{"swapfile.swap", "dev-sdb3.swap"}; !slices.Equal(units, want) {
		t.Fatalf("units %q, want %q", units, want)
	}
	dir := t.TempDir()
	if err := RecordMasked(dir, units); err != nil {
		t.Fatal(err)
	}
	if err := RecordMasked(dir, []string{"swapfile.swap", "x.swap"}); err != nil {
		t.Fatal(err)
	}
	got, err := Masked(dir)
	if want := []string{"swapfile.swap", "dev-sdb3.swap", "x.swap"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("record %q %v, want %q", got, err, want)
	}
}

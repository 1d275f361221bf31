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
	files := []byte("var-swap2.swap enabled -\ngen.swap generated -\nold.swap masked -\n")
	if got, want := Units(files), []string{"var-swap2.swap", "gen.swap"}; !slices.Equal(got, want) {
		t.Errorf("unit files %q, want %q", got, want)
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

// An admin's swap unit file in the unit dir is moved aside (recorded
// first) so a mask link can take its name; a link or no file is left
// alone; PutBack puts the file back over the mask link, byte for byte,
// skips a unit recorded but never moved, and never overwrites a file.
func TestMoveAsideAndPutBack(t *testing.T) {
	state, units := t.TempDir(), t.TempDir()
	const unit, text = "var-swap2.swap", "[Swap]\nWhat=/var/swap2\n"
	p := filepath.Join(units, unit)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(units, "dev-sdb2.swap")); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"dev-sdb2.swap", "none.swap"} {
		if moved, err := MoveAside(state, units, u); moved || err != nil {
			t.Errorf("MoveAside(%s) = %v, %v; want nothing moved", u, moved, err)
		}
	}
	moved, err := MoveAside(state, units, unit)
	if !moved || err != nil {
		t.Fatalf("MoveAside = %v, %v", moved, err)
	}
	if rec, _ := Moved(state); !slices.Equal(rec, []string{unit}) {
		t.Errorf("record %v", rec)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", p, err)
	}
	// What systemctl mask does next.
	if err := os.Symlink("/dev/null", p); err != nil {
		t.Fatal(err)
	}
	if err := record(state, MovedFile, []string{"never-moved.swap"}); err != nil {
		t.Fatal(err)
	}
	back, err := PutBack(state, units)
	if err != nil || !slices.Equal(back, []string{unit}) {
		t.Fatalf("PutBack = %v, %v", back, err)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("%s after PutBack: %v %v", p, fi, err)
	}
	if got, _ := os.ReadFile(p); string(got) != text {
		t.Errorf("%s after PutBack: %q", p, got)
	}
	if entries, _ := os.ReadDir(units); len(entries) != 2 {
		t.Errorf("unit dir after PutBack: %v", entries)
	}
	if back, err := PutBack(state, units); len(back) != 0 || err != nil {
		t.Errorf("second PutBack = %v, %v", back, err)
	}
	if _, err := MoveAside(state, units, unit); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("[Swap]\nWhat=/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PutBack(state, units); err == nil {
		t.Errorf("PutBack over a file of that name succeeded")
	}
}

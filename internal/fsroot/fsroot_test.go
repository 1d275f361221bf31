package fsroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tree returns a root and a sibling "outside" dir that nothing resolved in
// the root may reach.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "usr/lib"), filepath.Join(outside, "usr/lib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestResolveIsAChroot(t *testing.T) {
	root, outside := tree(t)
	symlink(t, "/usr/lib", filepath.Join(root, "lib"))             // absolute: re-rooted
	symlink(t, "../../../../..", filepath.Join(root, "usr/up"))    // ".." stops at the root
	symlink(t, outside, filepath.Join(root, "out"))                // absolute to the real outside
	symlink(t, "usr/lib/missing", filepath.Join(root, "dangling")) // resolved to where it would be
	symlink(t, "loop", filepath.Join(root, "loop"))

	for p, want := range map[string]string{
		"/lib/x":         "usr/lib/x",
		"lib":            "usr/lib",
		"usr/up/usr/lib": "usr/lib",
		"/usr/up":        "",
		"../../etc":      "etc",
		"/out/usr":       strings.TrimPrefix(outside, "/") + "/usr",
		"dangling":       "usr/lib/missing",
		"/no/such/dir":   "no/such/dir",
		"":               "",
	} {
		got, err := Resolve(root, p)
		if err != nil {
			t.Errorf("Resolve(%q): %v", p, err)
			continue
		}
		if w := filepath.Join(root, want); got != w {
			t.Errorf("Resolve(%q) = %s, want %s", p, got, w)
		}
	}
	if _, err := Resolve(root, "loop/x"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("link loop: %v, want ELOOP", err)
	}
}

func TestResolveNoFollowKeepsTheLastLink(t *testing.T) {
	root, _ := tree(t)
	symlink(t, "/usr", filepath.Join(root, "u"))
	symlink(t, "/etc/passwd", filepath.Join(root, "usr/lib/link"))
	for p, want := range map[string]string{
		"u/lib/link": "usr/lib/link",
		"/u":         "u",
		"u/lib/..":   "usr",
		"/":          "",
	} {
		got, err := ResolveNoFollow(root, p)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("ResolveNoFollow(%q) = %s, %v; want %s", p, got, err, filepath.Join(root, want))
		}
	}
}

func TestWithin(t *testing.T) {
	root, _ := tree(t)
	for host, want := range map[string]string{root: "/", root + "/usr/lib": "/usr/lib"} {
		if got := Within(root, host); got != want {
			t.Errorf("Within(%s) = %s, want %s", host, got, want)
		}
	}
	if got := Within("/", "/usr/lib"); got != "/usr/lib" {
		t.Errorf("Within(/, /usr/lib) = %s", got)
	}
}

func TestRelativeRoot(t *testing.T) {
	root, _ := tree(t)
	t.Chdir(filepath.Dir(root))
	got, err := Resolve("./x/../root", "/usr/lib")
	if err != nil || got != filepath.Join(root, "usr/lib") {
		t.Fatalf("Resolve with a relative root = %s, %v", got, err)
	}
}

func TestMkdirAllStaysInside(t *testing.T) {
	root, outside := tree(t)
	symlink(t, outside, filepath.Join(root, "opt"))
	symlink(t, "/opt/../../../..", filepath.Join(root, "var"))
	for _, p := range []string{"opt/usr/local/bin", "/var/lib/machines"} {
		got, err := MkdirAll(root, p, 0o755)
		if err != nil {
			t.Fatalf("MkdirAll(%s): %v", p, err)
		}
		if !strings.HasPrefix(got, root+"/") {
			t.Fatalf("MkdirAll(%s) = %s, outside %s", p, got, root)
		}
		if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
			t.Fatalf("MkdirAll(%s) did not create %s: %v", p, got, err)
		}
	}
	var found []string
	filepath.Walk(outside, func(p string, _ os.FileInfo, _ error) error {
		found = append(found, strings.TrimPrefix(p, outside))
		return nil
	})
	if strings.Join(found, " ") != " /usr /usr/lib" {
		t.Fatalf("something was created outside the root: %v", found)
	}
}

func TestMkdirAllModeIgnoresUmask(t *testing.T) {
	root, _ := tree(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	got, err := MkdirAll(root, "/var/lib/aks", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for p := got; p != root; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, %v; want 0755", p, fi.Mode().Perm(), err)
		}
	}
	// An existing directory keeps its mode.
	os.Chmod(filepath.Join(root, "usr"), 0o700)
	if _, err := MkdirAll(root, "/usr/lib/x", 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "usr")); fi.Mode().Perm() != 0o700 {
		t.Errorf("existing usr changed to %v", fi.Mode().Perm())
	}
}

func TestMkdirAllRefusesAFileInTheWay(t *testing.T) {
	root, _ := tree(t)
	if err := os.WriteFile(filepath.Join(root, "usr/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := MkdirAll(root, "usr/file/x", 0o755)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "usr/file")) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file in the way: %v", err)
	}
}

func TestOpenDirStaysInside(t *testing.T) {
	root, outside := tree(t)
	symlink(t, outside, filepath.Join(root, "abs"))
	symlink(t, "../../outside", filepath.Join(root, "usr/rel"))
	for _, dir := range []string{"/abs", "/usr/rel", "abs/usr/../.."} {
		d, err := MkdirOpen(root, dir, 0o755)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if err := d.WriteFile("probe", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(d.Name(), root) {
			t.Errorf("%s opened as %s, outside %s", dir, d.Name(), root)
		}
		d.Close()
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 || entries[0].Name() != "usr" {
		t.Errorf("outside written: %v", entries)
	}
	if _, err := OpenDir(root, "/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
	d, err := OpenDir(root, "/")
	if err != nil || d.Name() != root {
		t.Fatalf("root itself: %v %v", d, err)
	}
	d.Close()
}

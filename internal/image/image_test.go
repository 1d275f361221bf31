package image

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSpec(t *testing.T) {
	good := `{"schemaVersion":1,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["systemd","libc6=2.36-9"]}`
	if _, err := ParseSpec("s.json", []byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"schemaVersion":1,"nope":1}`, `unknown field "nope"`},
		{`{"schemaVersion":2,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["a1"]}`, "s.json: schemaVersion: 2 is not supported"},
		{`{"schemaVersion":1,"name":"w","distribution":"arch","suite":"bookworm","components":["main"],"packages":["a1"]}`, "s.json: distribution: \"arch\""},
		{`{"schemaVersion":1,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["Bad Name"]}`, "s.json: packages[0]:"},
		{`{"schemaVersion":1,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["a1"],"exclude":["usr/*"]}`, "s.json: exclude[0]:"},
		{`{"schemaVersion":1,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["a1"],"maskUnits":["foo"]}`, "s.json: maskUnits[0]:"},
		{`{"schemaVersion":1,"name":"w","distribution":"debian","suite":"bookworm","components":["main"],"packages":["a1"],"mirror":"ftp://x"}`, "s.json: mirror:"},
	} {
		if _, err := ParseSpec("s.json", []byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// TestExampleSpec: the default worker image's spec parses and names no
// mirror (the tests and the user supply one).
func TestExampleSpec(t *testing.T) {
	s, err := LoadSpec("../../examples/worker-image/bookworm.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Mirror != "" {
		t.Errorf("the example names mirror %s: no registry host belongs in the repo", s.Mirror)
	}
	for _, p := range []string{"systemd", "iptables", "conntrack", "ca-certificates"} {
		found := false
		for _, q := range s.Packages {
			found = found || q == p
		}
		if !found {
			t.Errorf("the default worker image lacks %s", p)
		}
	}
}

func TestExcluded(t *testing.T) {
	s := &Spec{Exclude: []string{"/usr/share/doc/*", "/usr/share/man"}, Keep: []string{"/usr/share/doc/*/copyright"}}
	for p, want := range map[string]bool{
		"/usr/share/doc/bash":           true,
		"/usr/share/doc/bash/README":    true,
		"/usr/share/doc/bash/copyright": false,
		"/usr/share/man/man1/ls.1.gz":   true,
		"/usr/share/mandoc":             false,
		"/usr/bin/ls":                   false,
	} {
		if got := s.excluded(p); got != want {
			t.Errorf("excluded(%s) = %v", p, got)
		}
	}
}

func TestTreeResolve(t *testing.T) {
	tr := NewTree()
	tr.Put("/usr/bin/real", &Node{Type: tar.TypeReg, Mode: 0o755})
	tr.Put("/bin", &Node{Type: tar.TypeSymlink, Link: "usr/bin"})
	tr.Put("/usr/sbin/abs", &Node{Type: tar.TypeSymlink, Link: "/bin/real"})
	tr.Put("/usr/sbin/up", &Node{Type: tar.TypeSymlink, Link: "../../../../bin/real"})
	tr.Put("/loop", &Node{Type: tar.TypeSymlink, Link: "/loop"})
	for p, want := range map[string]string{"/usr/sbin/abs": "/usr/bin/real", "/usr/sbin/up": "/usr/bin/real", "/bin/real": "/usr/bin/real", "/bin/../etc": "/usr/etc"} {
		got, _, err := tr.Resolve(p)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", p, got, err, want)
		}
	}
	if _, _, err := tr.Resolve("/loop"); err == nil {
		t.Error("a link loop resolved")
	}
}

func TestParseAlternatives(t *testing.T) {
	script := "update-alternatives --quiet --install /usr/bin/pager pager /bin/more 50 \\\n --slave /usr/share/man/man1/pager.1.gz pager.1.gz \\\n /usr/share/man/man1/more.1.gz || true\n" +
		"update-alternatives --install \"$BINPATH\"/w w /usr/bin/w.procps 50\n"
	got := parseAlternatives("util-linux", script)
	if len(got) != 1 || got[0].name != "pager" || got[0].priority != 50 || got[0].target != "/bin/more" || len(got[0].slaves) != 1 {
		t.Errorf("parsed %+v (the call with shell variables must be skipped)", got)
	}
}

// TestPackRootfs: an existing tree packs to the same digest twice, with
// its owners, modes and hard links.
func TestPackRootfs(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/a"), []byte("a"), 0o755))
	must(os.Link(filepath.Join(dir, "usr/bin/a"), filepath.Join(dir, "usr/bin/b")))
	must(os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	must(os.MkdirAll(filepath.Join(dir, "var/lib/dpkg"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "var/lib/dpkg/status"), []byte("Package: a\nStatus: install ok installed\nVersion: 1\nArchitecture: amd64\n\n"), 0o644))
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	pack := func() *Result {
		res, err := PackRootfs(context.Background(), RootfsOptions{Dir: dir, OutputDir: filepath.Join(t.TempDir(), "out"), Arch: "amd64", Created: created})
		must(err)
		return res
	}
	a, b := pack(), pack()
	if a.Digest != b.Digest {
		t.Errorf("digests differ: %s %s", a.Digest, b.Digest)
	}
	tree := layoutTree(t, a.Dir)
	if x, y := tree.Get("/usr/bin/a"), tree.Get("/usr/bin/b"); x == nil || y == nil || x.Type != tar.TypeReg || y.Mode != 0o755 {
		t.Errorf("hard-linked files: %+v %+v", x, y)
	}
	sbom, _ := os.ReadFile(filepath.Join(a.Dir, SBOMFileName))
	if !strings.Contains(string(sbom), `"name": "a"`) {
		t.Errorf("SBOM lacks the dpkg status's package:\n%s", sbom)
	}
}

package deb_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/image/deb"
	"github.com/Azure/aks-flex-node/internal/image/deb/debtest"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.0", "1.0", 0},
		{"1.0", "1.1", -1},
		{"1.10", "1.9", 1},
		{"1.0~rc1", "1.0", -1},
		{"1.0", "1.0+b1", -1},
		{"1:0.9", "2.0", 1},
		{"2.36-9+deb12u4", "2.36-9+deb12u10", -1},
		{"252.39-1~deb12u2", "252.39-1", -1},
		{"1.0a", "1.0", 1},
		{"1.0-1", "1.0-01", 0},
		{"0:1.0", "1.0", 0},
		{"1.0~~", "1.0~", -1},
		{"1.0.", "1.0", 1},
	} {
		if got := deb.CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := deb.CompareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

func TestParseRelations(t *testing.T) {
	rels, err := deb.ParseRelations("libc6 (>= 2.34), awk | mawk:any (<< 2), python3:any, foo (>2)")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rels); got != 4 {
		t.Fatalf("%d clauses", got)
	}
	if s := rels[1].String(); s != "awk | mawk (<< 2)" {
		t.Errorf("clause 1: %s", s)
	}
	if s := rels[3].String(); s != "foo (>= 2)" {
		t.Errorf("obsolete > is >=: %s", s)
	}
	if _, err := deb.ParseRelations("libc6 (>= )"); err == nil {
		t.Error("a relation without a version parsed")
	}
}

func pkg(name, version, depends string) *deb.Package {
	p := deb.Pkg(name, version)
	p.SetRelations("", depends, "")
	return p
}

func TestResolve(t *testing.T) {
	mawk := pkg("mawk", "1.3", "libc6")
	mawk.Provides = []deb.Provided{{Name: "awk"}}
	mawk.Priority = "required"
	gawk := pkg("gawk", "5.2", "libc6")
	gawk.Provides = []deb.Provided{{Name: "awk"}}
	gawk.Priority = "optional"
	base := pkg("base-files", "12", "")
	base.Essential = true
	base.SetRelations("awk", "", "")
	u := deb.NewUniverse([]*deb.Package{
		base, mawk, gawk,
		pkg("libc6", "2.36", ""),
		pkg("libc6", "2.31", ""),
		pkg("systemd", "252", "libc6 (>= 2.34), libsystemd-shared (= 252) | libfoo"),
		pkg("libsystemd-shared", "252", "libc6"),
		pkg("app", "1", "libmissing (>= 3)"),
		pkg("old", "1", "libc6 (<< 2.0)"),
	})
	got, err := u.Resolve([]string{"systemd"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.ID())
	}
	if want := "base-files=12 libc6=2.36 libsystemd-shared=252 mawk=1.3 systemd=252"; strings.Join(names, " ") != want {
		t.Errorf("resolved %s, want %s", strings.Join(names, " "), want)
	}
	// A request for a provider wins over the priority order.
	got, err = u.Resolve([]string{"gawk"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if p.Name == "mawk" {
			t.Errorf("mawk chosen although gawk, which provides awk, was asked for")
		}
	}
	var ue *deb.UnsatisfiableError
	if _, err := u.Resolve([]string{"app"}, false); !errors.As(err, &ue) || ue.Package != "app=1" || ue.Missing != "libmissing (>= 3)" {
		t.Errorf("unsatisfiable: %v", err)
	} else if !strings.Contains(err.Error(), "app=1 depends on libmissing (>= 3)") {
		t.Errorf("message: %v", err)
	}
	if _, err := u.Resolve([]string{"old", "systemd"}, false); err == nil {
		t.Error("a version nobody has resolved")
	}
	var nf *deb.NotFoundError
	if _, err := u.Resolve([]string{"nosuch"}, false); !errors.As(err, &nf) {
		t.Errorf("missing request: %v", err)
	}
	if _, err := u.Resolve([]string{"libc6=2.31"}, false); err != nil {
		t.Errorf("pinned version: %v", err)
	}
}

func TestReadDebCompressions(t *testing.T) {
	for _, c := range []string{"xz", "gz", "zst"} {
		b := debtest.Deb(t, debtest.Pkg{Name: "hello", Version: "1.0-1", Compression: c, Postinst: "#!/bin/sh\n",
			Files: []debtest.File{{Path: "/usr/"}, {Path: "/usr/bin/hello", Body: "hi", Mode: 0o755}}})
		var names []string
		ctl, err := deb.ReadDeb("hello.deb", bytes.NewReader(b), func(tr *tar.Reader) error {
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				names = append(names, h.Name)
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if ctl.Paragraph.Get("Package") != "hello" || string(ctl.Files["postinst"]) != "#!/bin/sh\n" {
			t.Errorf("%s: control %v", c, ctl.Paragraph.Keys())
		}
		if strings.Join(names, ",") != "./usr/,./usr/bin/hello" {
			t.Errorf("%s: entries %v", c, names)
		}
	}
	if _, err := deb.ReadDeb("junk.deb", strings.NewReader("not an ar"), nil); err == nil || !strings.Contains(err.Error(), "junk.deb") {
		t.Errorf("junk: %v", err)
	}
}

// repo is a signed archive on loopback with two packages.
func repo(t *testing.T) (*deb.Mirror, *debtest.Repo, string) {
	key := debtest.NewKey(t, "archive")
	dir := t.TempDir()
	r := debtest.Write(t, dir, "stable", key, []debtest.Pkg{
		{Name: "a", Version: "1", Depends: "b", Files: []debtest.File{{Path: "/a", Body: "a"}}},
		{Name: "b", Version: "2", Files: []debtest.File{{Path: "/b", Body: "b"}}},
	})
	m := &deb.Mirror{URL: debtest.Serve(t, dir), Get: get, CacheDir: t.TempDir()}
	return m, r, debtest.WriteKeyring(t, t.TempDir(), key)
}

func get(ctx context.Context, u string, max int64) (io.ReadCloser, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, errors.New(resp.Status)
	}
	return resp.Body, nil
}

func TestMirror(t *testing.T) {
	ctx := context.Background()
	m, r, keyring := repo(t)
	ks, err := deb.LoadKeyring(keyring)
	if err != nil {
		t.Fatal(err)
	}
	rel, _, err := m.Release(ctx, "stable", ks)
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Date.Equal(r.Date) {
		t.Errorf("date %s", rel.Date)
	}
	pkgs, err := m.Index(ctx, "stable", rel, "main", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 {
		t.Fatalf("%d packages", len(pkgs))
	}
	p, err := m.Fetch(ctx, pkgs[0].Filename, deb.FileSum{SHA256: pkgs[0].SHA256, Size: pkgs[0].Size})
	if err != nil {
		t.Fatal(err)
	}
	// The cached copy is served without the mirror.
	m2 := *m
	m2.Get = func(context.Context, string, int64) (io.ReadCloser, error) { return nil, errors.New("offline") }
	if p2, err := m2.Fetch(ctx, pkgs[0].Filename, deb.FileSum{SHA256: pkgs[0].SHA256, Size: pkgs[0].Size}); err != nil || p2 != p {
		t.Errorf("cached fetch: %v %s", err, p2)
	}

	// An InRelease by another key is refused, naming it.
	r.Sign(t, debtest.NewKey(t, "intruder"))
	if _, _, err := m.Release(ctx, "stable", ks); err == nil || !strings.Contains(err.Error(), m.URL+"/dists/stable/InRelease") || !strings.Contains(err.Error(), "none of which is in the keyring") {
		t.Errorf("foreign signature: %v", err)
	}
	// A Release that expired is refused.
	if _, err := deb.VerifyInRelease("x", []byte("junk"), ks, time.Now()); err == nil {
		t.Error("unsigned file accepted")
	}
}

func TestFetchRefusesChangedFile(t *testing.T) {
	ctx := context.Background()
	m, r, keyring := repo(t)
	ks, _ := deb.LoadKeyring(keyring)
	rel, _, err := m.Release(ctx, "stable", ks)
	if err != nil {
		t.Fatal(err)
	}
	debtest.FlipByte(t, filepath.Join(r.Dir, "dists/stable/main/binary-amd64/Packages.gz"))
	_, err = m.Index(ctx, "stable", rel, "main", "amd64")
	var he *deb.HashError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "/dists/stable/main/binary-amd64/Packages.gz: sha256 ") {
		t.Errorf("changed index: %v", err)
	}
	if des, _ := os.ReadDir(filepath.Join(m.CacheDir, "sha256")); len(des) != 0 {
		t.Errorf("a file that did not verify was cached: %v", des)
	}
}

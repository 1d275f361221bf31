package image

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/Azure/aks-flex-node/internal/image/deb"
	"github.com/Azure/aks-flex-node/internal/image/deb/debtest"
)

// workerPackages is a small archive shaped like Debian's: Essential
// packages, /bin and /lib paths merged-/usr moves, alternatives from
// postinst, a virtual package, a hard link and a compatibility link.
func workerPackages() []debtest.Pkg {
	f := func(p, body string) debtest.File { return debtest.File{Path: p, Body: body, Mode: 0o755} }
	return []debtest.Pkg{
		{Name: "base-files", Version: "12.4", Essential: true, PreDepends: "awk", Files: []debtest.File{
			{Path: "/etc/"}, {Path: "/etc/os-release", Type: tar.TypeSymlink, Link: "../usr/lib/os-release"},
			{Path: "/usr/"}, {Path: "/usr/lib/"}, {Path: "/usr/lib/os-release", Body: "ID=debian\n"}, {Path: "/tmp/", Mode: 0o1777}}},
		{Name: "base-passwd", Version: "3.6", Essential: true, Files: []debtest.File{
			{Path: "/usr/share/base-passwd/passwd.master", Body: "root:*:0:0:root:/root:/bin/bash\nnobody:*:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
			{Path: "/usr/share/base-passwd/group.master", Body: "root:*:0:\nshadow:*:42:\n"}}},
		{Name: "libc6", Version: "2.36-9", Priority: "required", Files: []debtest.File{
			{Path: "/lib/x86_64-linux-gnu/libc.so.6", Body: "libc"}, {Path: "/lib64/ld-linux-x86-64.so.2", Type: tar.TypeSymlink, Link: "/lib/x86_64-linux-gnu/ld.so"},
			{Path: "/lib/x86_64-linux-gnu/ld.so", Body: "ld"}}},
		{Name: "mawk", Version: "1.3.4", Priority: "required", Provides: "awk", Depends: "libc6 (>= 2.34)",
			Files:    []debtest.File{f("/usr/bin/mawk", "mawk")},
			Postinst: "#!/bin/sh\nupdate-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5 \\\n  --slave /usr/share/man/man1/awk.1.gz awk.1.gz /usr/share/man/man1/mawk.1.gz \\\n  --slave /usr/bin/nawk nawk /usr/bin/mawk\n"},
		{Name: "gawk", Version: "5.2", Priority: "optional", Provides: "awk", Files: []debtest.File{f("/usr/bin/gawk", "gawk")}},
		{Name: "systemd", Version: "252.39-1", Depends: "libc6, mount", Files: []debtest.File{
			f("/lib/systemd/systemd", "init"), f("/lib/systemd/systemd-journald", "journald"),
			{Path: "/lib/systemd/system/multi-user.target", Body: "[Unit]\n"}, f("/bin/systemctl", "systemctl"),
			{Path: "/usr/bin/systemctl", Type: tar.TypeSymlink, Link: "/bin/systemctl"}, // a compatibility link onto itself once merged
			{Path: "/var/"}, {Path: "/var/lib/"}}},
		{Name: "mount", Version: "2.38", Depends: "util-linux", Files: []debtest.File{f("/bin/mount", "mount"), f("/bin/umount", "umount")}},
		{Name: "util-linux", Version: "2.38", Essential: true, Files: []debtest.File{f("/usr/bin/nsenter", "nsenter"),
			{Path: "/usr/bin/unshare", Type: tar.TypeLink, Link: "/usr/bin/nsenter"}}},
		{Name: "iproute2", Version: "6.1", Depends: "libc6", Compression: "zst", Files: []debtest.File{f("/bin/ip", "ip"), {Path: "/sbin/ip", Type: tar.TypeSymlink, Link: "../bin/ip"}}},
		{Name: "conntrack", Version: "1.4", Files: []debtest.File{f("/usr/sbin/conntrack", "conntrack")}},
		{Name: "kmod", Version: "30", Compression: "gz", Files: []debtest.File{f("/bin/kmod", "kmod"), {Path: "/sbin/modprobe", Type: tar.TypeSymlink, Link: "/bin/kmod"}}},
		{Name: "iptables", Version: "1.8.9", Depends: "libc6", Files: []debtest.File{f("/usr/sbin/xtables-nft-multi", "nft"),
			{Path: "/usr/sbin/iptables-nft", Type: tar.TypeSymlink, Link: "xtables-nft-multi"},
			{Path: "/usr/sbin/iptables-legacy", Type: tar.TypeSymlink, Link: "xtables-nft-multi"}},
			Postinst: "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  update-alternatives \\\n    --install /usr/sbin/iptables iptables /usr/sbin/iptables-legacy 10\n  update-alternatives \\\n    --install /usr/sbin/iptables iptables /usr/sbin/iptables-nft 20\nfi\n"},
		{Name: "ca-certificates", Version: "20250419", Files: []debtest.File{
			{Path: "/usr/share/ca-certificates/mozilla/A.crt", Body: "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"},
			{Path: "/usr/share/ca-certificates/mozilla/B.crt", Body: "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----"},
			{Path: "/usr/share/doc/ca-certificates/copyright", Body: "MPL"}, {Path: "/usr/share/doc/ca-certificates/README", Body: "readme"}}},
		{Name: "broken", Version: "1", Depends: "libgone (>= 2)"},
	}
}

// testMirror serves the worker packages, signed, from loopback.
type testMirror struct {
	repo    *debtest.Repo
	url     string
	keyring string
}

func newTestMirror(t *testing.T, pkgs []debtest.Pkg) *testMirror {
	t.Helper()
	key := debtest.NewKey(t, "archive")
	dir := t.TempDir()
	r := debtest.Write(t, dir, "bookworm", key, pkgs)
	return &testMirror{repo: r, url: debtest.Serve(t, dir), keyring: debtest.WriteKeyring(t, t.TempDir(), key)}
}

func testSpec(m *testMirror, pkgs ...string) *Spec {
	if len(pkgs) == 0 {
		pkgs = []string{"systemd", "iproute2", "conntrack", "kmod", "iptables", "ca-certificates"}
	}
	return &Spec{SchemaVersion: 1, Name: "test worker", Distribution: "debian", Suite: "bookworm", Components: []string{"main"},
		Mirror: m.url, Keyring: m.keyring, Packages: pkgs,
		Exclude: []string{"/usr/share/doc/*"}, Keep: []string{"/usr/share/doc/*/copyright"},
		MaskUnits: []string{"getty.target"}}
}

func httpGet(ctx context.Context, u string, _ int64) (io.ReadCloser, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, errors.New(resp.Status)
	}
	return resp.Body, nil
}

func build(t *testing.T, s *Spec, lock *Lock, cache string) (*Result, error) {
	t.Helper()
	return Build(context.Background(), Options{Spec: s, Arch: "amd64", Lock: lock, OutputDir: filepath.Join(t.TempDir(), "out"), CacheDir: cache, Get: httpGet, Log: func(s string) { t.Log(s) }})
}

// layoutTree reads the built image back through go-containerregistry
// and indexes it.
func layoutTree(t *testing.T, dir string) *Tree {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "worker" {
		t.Fatalf("index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := IndexImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func TestBuild(t *testing.T) {
	m := newTestMirror(t, workerPackages())
	res, err := build(t, testSpec(m), nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tree := layoutTree(t, res.Dir)
	link := func(p, want string) {
		t.Helper()
		if n := tree.Get(p); n == nil || n.Type != tar.TypeSymlink || n.Link != want {
			t.Errorf("%s: %+v, want a link to %s", p, n, want)
		}
	}
	link("/bin", "usr/bin")
	link("/lib64", "usr/lib64")
	link("/usr/sbin/iptables", "/etc/alternatives/iptables")
	link("/etc/alternatives/iptables", "/usr/sbin/iptables-nft") // priority 20 beats 10
	link("/usr/bin/awk", "/etc/alternatives/awk")
	link("/usr/bin/nawk", "/etc/alternatives/nawk")
	link("/usr/sbin/ip", "../bin/ip") // relative, rewritten for its merged place
	link("/etc/systemd/system/default.target", "/usr/lib/systemd/system/multi-user.target")
	link("/etc/systemd/system/getty.target", "/dev/null")
	if n := tree.Get("/usr/bin/systemctl"); n == nil || n.Type != tar.TypeReg {
		t.Errorf("/usr/bin/systemctl: the file lost to its own compatibility link: %+v", n)
	}
	if tree.Get("/usr/share/doc/ca-certificates/README") != nil || tree.Get("/usr/share/doc/ca-certificates/copyright") == nil {
		t.Error("exclude/keep not applied")
	}
	if n := tree.Get("/etc/machine-id"); n == nil || n.Size != 0 {
		t.Errorf("machine-id: %+v", n)
	}
	if n := tree.Get("/etc/shadow"); n == nil || n.Mode != 0o640 || n.GID != shadowGID {
		t.Errorf("shadow: %+v", n)
	}
	if n := tree.Get("/etc/hosts"); n == nil || n.Type != tar.TypeReg || n.Size == 0 {
		t.Errorf("/etc/hosts (containerd copies it into pod sandboxes): %+v", n)
	}
	if n := tree.Get("/var/log/journal"); n == nil || n.Type != tar.TypeDir {
		t.Errorf("journal dir: %+v", n)
	}
	if res.Packages != 12 {
		t.Errorf("%d packages (want the 6 asked for, their dependencies and the Essential ones)", res.Packages)
	}
	for _, f := range CheckContract(tree) {
		if !f.OK {
			t.Errorf("contract: %s: %s", f.Item, f.Detail)
		}
	}
	status, err := os.ReadFile(filepath.Join(res.Dir, LockFileName))
	if err != nil || !strings.Contains(string(status), `"name": "mawk"`) || strings.Contains(string(status), `"name": "gawk"`) {
		t.Errorf("lock: %v\n%s", err, status)
	}
	sbom, err := os.ReadFile(filepath.Join(res.Dir, SBOMFileName))
	if err != nil || !strings.Contains(string(sbom), `"spdxVersion": "SPDX-2.3"`) || !strings.Contains(string(sbom), "pkg:deb/debian/systemd@252.39-1?arch=amd64") {
		t.Errorf("sbom: %v\n%s", err, sbom)
	}
}

// TestBuildReproducible: two builds from the same lock give the same
// image digest and the same bytes, and the lock a first build writes
// builds the same image again.
func TestBuildReproducible(t *testing.T) {
	m := newTestMirror(t, workerPackages())
	cache := t.TempDir()
	first, err := build(t, testSpec(m), nil, cache)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := LoadLock(filepath.Join(first.Dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	a, err := build(t, testSpec(m), lock, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(t, testSpec(m), lock, cache)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || a.Digest != first.Digest {
		t.Fatalf("digests differ: %s %s %s", first.Digest, a.Digest, b.Digest)
	}
	for _, f := range []string{"index.json", LockFileName, SBOMFileName, "blobs/sha256/" + strings.TrimPrefix(a.Layer.Digest, "sha256:")} {
		x, _ := os.ReadFile(filepath.Join(a.Dir, f))
		y, _ := os.ReadFile(filepath.Join(b.Dir, f))
		if len(x) == 0 || string(x) != string(y) {
			t.Errorf("%s differs between builds from one lock", f)
		}
	}
	// A lock missing a package the spec asks for is refused.
	if _, err := build(t, testSpec(m, "systemd", "gawk"), lock, cache); err == nil || !strings.Contains(err.Error(), "gawk") {
		t.Errorf("stale lock: %v", err)
	}
}

func TestBuildRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, m *testMirror)
		want   string
	}{
		{"deb changed by one byte", func(t *testing.T, m *testMirror) {
			debtest.FlipByte(t, filepath.Join(m.repo.Dir, "pool/main/s/systemd/systemd_252.39-1_amd64.deb"))
		}, "/pool/main/s/systemd/systemd_252.39-1_amd64.deb: sha256 "},
		{"Packages changed by one byte", func(t *testing.T, m *testMirror) {
			debtest.FlipByte(t, filepath.Join(m.repo.Dir, "dists/bookworm/main/binary-amd64/Packages.gz"))
		}, "/dists/bookworm/main/binary-amd64/Packages.gz: sha256 "},
		{"InRelease signed by another key", func(t *testing.T, m *testMirror) {
			m.repo.Sign(t, debtest.NewKey(t, "intruder"))
		}, "/dists/bookworm/InRelease: signed by key(s) "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMirror(t, workerPackages())
			tc.tamper(t, m)
			_, err := build(t, testSpec(m), nil, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), m.url+tc.want) {
				t.Errorf("err = %v, want one naming %s", err, m.url+tc.want)
			}
		})
	}
	t.Run("unsatisfiable", func(t *testing.T) {
		m := newTestMirror(t, workerPackages())
		_, err := build(t, testSpec(m, "systemd", "broken"), nil, t.TempDir())
		var ue *deb.UnsatisfiableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "package broken=1 depends on libgone (>= 2)") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestContractMissingIptables: an image built without iptables (and nft)
// fails the contract (for the default config, which runs portmap) by
// that item's name, and only that one.
func TestContractMissingIptables(t *testing.T) {
	m := newTestMirror(t, workerPackages())
	res, err := build(t, testSpec(m, "systemd", "iproute2", "conntrack", "kmod", "ca-certificates"), nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	misses := Misses(CheckContract(layoutTree(t, res.Dir)))
	if len(misses) != 1 || misses[0].Item != "iptables" {
		t.Fatalf("misses: %+v", misses)
	}
	err = (&Report{Ref: "x", Findings: misses}).Err()
	if err == nil || !strings.Contains(err.Error(), "iptables: none of iptables in") {
		t.Errorf("err = %v", err)
	}
}

// Package debtest makes Debian archives for tests: .deb files, Packages
// indexes and a Release signed with a key made for the test, served from
// loopback. Nothing in it is used outside tests.
package debtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// File is one payload entry of a package.
type File struct {
	Path string // absolute, as the package ships it ("/bin/ls")
	Mode int64
	Body string
	Link string // symlink target, for Type TypeSymlink; hard-link target for TypeLink
	Type byte   // default TypeReg (TypeDir for a Path ending in "/")
}

// Pkg is one binary package.
type Pkg struct {
	Name, Version, Arch string
	Essential           bool
	Priority            string
	Depends, PreDepends string
	Provides, Conflicts string
	Files               []File
	Postinst            string
	// Compression of data.tar: "xz" (default), "gz" or "zst".
	Compression string
}

// Repo is an archive written to Dir.
type Repo struct {
	Dir, Suite, Component, Arch string
	Date                        time.Time
}

// NewKey makes a signing key.
func NewKey(t testing.TB, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "test", name+"@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// WriteKeyring writes e's public key as an armored keyring and returns
// its path.
func WriteKeyring(t testing.TB, dir string, e *openpgp.Entity) string {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p := filepath.Join(dir, "keyring-"+strings.ReplaceAll(e.PrimaryKey.KeyIdString(), " ", "")+".asc")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Deb renders a .deb.
func Deb(t testing.TB, p Pkg) []byte {
	t.Helper()
	arch := p.Arch
	if arch == "" {
		arch = "amd64"
	}
	ctl := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: Test <test@example.invalid>\n", p.Name, p.Version, arch)
	for _, f := range []struct{ k, v string }{{"Pre-Depends", p.PreDepends}, {"Depends", p.Depends}, {"Provides", p.Provides}, {"Conflicts", p.Conflicts}, {"Priority", p.Priority}} {
		if f.v != "" {
			ctl += f.k + ": " + f.v + "\n"
		}
	}
	if p.Essential {
		ctl += "Essential: yes\n"
	}
	ctl += "Description: test package " + p.Name + "\n"
	cfiles := []File{{Path: "/control", Body: ctl, Mode: 0o644}}
	if p.Postinst != "" {
		cfiles = append(cfiles, File{Path: "/postinst", Body: p.Postinst, Mode: 0o755})
	}
	control := gz(t, tarOf(t, cfiles))
	data := tarOf(t, p.Files)
	member := "data.tar.xz"
	switch p.Compression {
	case "gz":
		data, member = gz(t, data), "data.tar.gz"
	case "zst":
		enc, _ := zstd.NewWriter(nil)
		data, member = enc.EncodeAll(data, nil), "data.tar.zst"
	default:
		var b bytes.Buffer
		w, err := xz.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		data = b.Bytes()
	}
	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	for _, m := range []struct {
		name string
		body []byte
	}{{"debian-binary", []byte("2.0\n")}, {"control.tar.gz", control}, {member, data}} {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", m.name, 0, 0, 0, "100644", len(m.body))
		ar.Write(m.body)
		if len(m.body)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	return ar.Bytes()
}

func tarOf(t testing.TB, files []File) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: "." + f.Path, Mode: f.Mode, Typeflag: f.Type, Linkname: f.Link, ModTime: time.Unix(1700000000, 0)}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		switch {
		case h.Typeflag == 0 && strings.HasSuffix(f.Path, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case h.Typeflag == 0:
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = "." + f.Link
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(f.Body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Write writes pkgs as an archive under dir signed by key: pool/ with
// the .debs, dists/<suite>/<component>/binary-<arch>/Packages and
// Packages.gz, and the InRelease that signs their hashes.
func Write(t testing.TB, dir, suite string, key *openpgp.Entity, pkgs []Pkg) *Repo {
	t.Helper()
	// Dated yesterday (whole days, so one run's builds agree): a fixed
	// date would, in time, pass the age bound a Release is judged by.
	r := &Repo{Dir: dir, Suite: suite, Component: "main", Arch: "amd64", Date: time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)}
	var index bytes.Buffer
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	for _, p := range pkgs {
		b := Deb(t, p)
		arch := p.Arch
		if arch == "" {
			arch = "amd64"
		}
		rel := fmt.Sprintf("pool/main/%c/%s/%s_%s_%s.deb", p.Name[0], p.Name, p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), arch)
		writeFile(t, filepath.Join(dir, rel), b)
		fmt.Fprintf(&index, "Package: %s\nVersion: %s\nArchitecture: %s\n", p.Name, p.Version, arch)
		for _, f := range []struct{ k, v string }{{"Pre-Depends", p.PreDepends}, {"Depends", p.Depends}, {"Provides", p.Provides}, {"Conflicts", p.Conflicts}, {"Priority", p.Priority}} {
			if f.v != "" {
				fmt.Fprintf(&index, "%s: %s\n", f.k, f.v)
			}
		}
		if p.Essential {
			index.WriteString("Essential: yes\n")
		}
		fmt.Fprintf(&index, "Filename: %s\nSize: %d\nSHA256: %s\nDescription: test package %s\n multi-line description\n\n", rel, len(b), sum(b), p.Name)
	}
	base := "main/binary-amd64/Packages"
	writeFile(t, filepath.Join(dir, "dists", suite, base), index.Bytes())
	writeFile(t, filepath.Join(dir, "dists", suite, base+".gz"), gz(t, index.Bytes()))
	r.Sign(t, key)
	return r
}

// Sign writes dists/<suite>/InRelease over the indexes as they are now,
// signed by key.
func (r *Repo) Sign(t testing.TB, key *openpgp.Entity) {
	t.Helper()
	var rel bytes.Buffer
	fmt.Fprintf(&rel, "Origin: Test\nSuite: %s\nCodename: %s\nDate: %s\nArchitectures: amd64\nComponents: main\nSHA256:\n", r.Suite, r.Suite, r.Date.Format(time.RFC1123))
	base := "main/binary-amd64/Packages"
	for _, f := range []string{base, base + ".gz"} {
		b, err := os.ReadFile(filepath.Join(r.Dir, "dists", r.Suite, f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rel, " %s %d %s\n", sum(b), len(b), f)
	}
	var out bytes.Buffer
	w, err := clearsign.Encode(&out, key.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(rel.Bytes())
	w.Close()
	writeFile(t, filepath.Join(r.Dir, "dists", r.Suite, "InRelease"), out.Bytes())
}

func writeFile(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FlipByte changes one byte of the file at p (in the middle).
func FlipByte(t testing.TB, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Serve serves dir over plain HTTP on a loopback port for the test's
// lifetime and returns its URL.
func Serve(t testing.TB, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

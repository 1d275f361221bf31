package artifact

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func testSpec() *Spec {
	return &Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: testComponents,
		Images: []Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}}}
}

// srcTree is a --from-dir tree: the bundle's paths, no manifest.
func srcTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for rel, data := range payloads(t, testComponents) {
		put(t, dir, rel, data)
	}
	return dir
}

func build(t *testing.T, o BuildOptions) (*Manifest, []string, error) {
	t.Helper()
	var notes []string
	if o.Spec == nil {
		o.Spec = testSpec()
	}
	if o.OutputDir == "" {
		o.OutputDir = filepath.Join(t.TempDir(), "bundle")
	}
	o.Note = func(s string) { notes = append(notes, s) }
	m, err := Build(context.Background(), o)
	return m, notes, err
}

func TestBuildLegalUnset(t *testing.T) {
	src := srcTree(t)
	// A NOTICE in the working directory or the source tree is not picked
	// up: an unset flag means no legal files, never "look somewhere".
	put(t, src, "NOTICE", []byte("notice"))
	out := filepath.Join(t.TempDir(), "b")
	m, notes, err := build(t, BuildOptions{FromDir: src, OutputDir: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Legal) != 0 || len(notes) != 0 {
		t.Fatalf("legal %v notes %v", m.Legal, notes)
	}
	if _, err := os.Stat(filepath.Join(out, "legal")); !os.IsNotExist(err) {
		t.Fatalf("legal/ exists: %v", err)
	}
	if ps := Verify(context.Background(), out, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
}

func TestBuildLegalBoth(t *testing.T) {
	legal := t.TempDir()
	put(t, legal, "LICENSE", []byte("MIT"))
	put(t, legal, "NOTICE", []byte("Copyright"))
	put(t, legal, "README.md", []byte("not legal"))
	put(t, legal, "LICENSES.md", []byte("not the LICENSE"))
	out := filepath.Join(t.TempDir(), "b")
	m, notes, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: out, LegalDir: legal})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Errorf("notes: %v", notes)
	}
	want := []LegalFile{{"legal/LICENSE", sumHex([]byte("MIT")), 3}, {"legal/NOTICE", sumHex([]byte("Copyright")), 9}}
	if len(m.Legal) != 2 || m.Legal[0] != want[0] || m.Legal[1] != want[1] {
		t.Fatalf("legal = %+v", m.Legal)
	}
	loaded, err := LoadManifest(out)
	if err != nil || len(loaded.Legal) != 2 {
		t.Fatalf("manifest legal %+v %v", loaded, err)
	}
	if ps := Verify(context.Background(), out, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	// A changed legal file is a problem like any other.
	os.WriteFile(filepath.Join(out, "legal/NOTICE"), []byte("Copyleft!"), 0o644)
	if ps := Verify(context.Background(), out, testComponents); len(ps) != 1 || !strings.Contains(ps[0].Error(), "legal/NOTICE: sha256") {
		t.Fatalf("problems %v", ps)
	}
}

func TestBuildLegalLicenseOnly(t *testing.T) {
	legal := t.TempDir()
	put(t, legal, "LICENSE", []byte("Apache-2.0"))
	m, notes, err := build(t, BuildOptions{FromDir: srcTree(t), LegalDir: legal})
	if err != nil {
		t.Fatalf("a missing NOTICE must never fail a build: %v", err)
	}
	if len(m.Legal) != 1 || m.Legal[0].Path != "legal/LICENSE" {
		t.Fatalf("legal = %+v", m.Legal)
	}
	if len(notes) != 1 || strings.Contains(notes[0], "\n") || !strings.Contains(notes[0], "no NOTICE") || !strings.Contains(notes[0], legal) {
		t.Fatalf("want one note line naming %s, got %q", legal, notes)
	}
}

// A dangling NOTICE link (a repository linking to a file it no longer
// has) is a missing notice: a note, never a failure. A dangling LICENSE
// is an error naming it.
func TestBuildLegalDanglingNotice(t *testing.T) {
	legal := t.TempDir()
	put(t, legal, "LICENSE", []byte("MIT"))
	if err := os.Symlink(filepath.Join(legal, "gone"), filepath.Join(legal, "NOTICE")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(legal, "THIRD_PARTY_NOTICES"), 0o755)
	m, notes, err := build(t, BuildOptions{FromDir: srcTree(t), LegalDir: legal})
	if err != nil {
		t.Fatalf("a dangling NOTICE must not fail a build: %v", err)
	}
	if len(m.Legal) != 1 || m.Legal[0].Path != "legal/LICENSE" {
		t.Fatalf("legal = %+v", m.Legal)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"skipping NOTICE in " + legal, "skipping THIRD_PARTY_NOTICES in " + legal} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	for _, n := range notes {
		if strings.Contains(n, "\n") {
			t.Errorf("note spans lines: %q", n)
		}
	}

	broken := t.TempDir()
	if err := os.Symlink(filepath.Join(broken, "gone"), filepath.Join(broken, "LICENSE")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), LegalDir: broken}); err == nil || !strings.Contains(err.Error(), "--legal-files-dir "+broken+": LICENSE") {
		t.Fatalf("dangling LICENSE: %v", err)
	}
}

func TestBuildLegalMissingDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	out := filepath.Join(t.TempDir(), "b")
	_, _, err := build(t, BuildOptions{FromDir: srcTree(t), LegalDir: missing, OutputDir: out})
	if err == nil || !strings.Contains(err.Error(), "--legal-files-dir "+missing) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("failed build left %s: %v", out, err)
	}
	// A directory without LICENSE is an error naming it.
	noLicense := t.TempDir()
	put(t, noLicense, "NOTICE", []byte("n"))
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), LegalDir: noLicense}); err == nil || !strings.Contains(err.Error(), noLicense+" has no LICENSE") {
		t.Fatalf("err = %v", err)
	}
}

// snapshot maps every path under dir to its mode and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBuildDeterministic(t *testing.T) {
	src := srcTree(t)
	legal := t.TempDir()
	put(t, legal, "LICENSE", []byte("MIT"))
	put(t, legal, "THIRD_PARTY_NOTICES.txt", []byte("third"))
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	if _, _, err := build(t, BuildOptions{FromDir: src, OutputDir: a, LegalDir: legal}); err != nil {
		t.Fatal(err)
	}
	// A different umask must not change the output.
	old := umask(0o077)
	_, _, err := build(t, BuildOptions{FromDir: src, OutputDir: b, LegalDir: legal})
	umask(old)
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := snapshot(t, a), snapshot(t, b)
	if len(sa) < 16 {
		t.Fatalf("only %d entries", len(sa))
	}
	for p, v := range sa {
		if sb[p] != v {
			t.Errorf("%s differs between two builds", p)
		}
	}
	for p := range sb {
		if _, ok := sa[p]; !ok {
			t.Errorf("%s only in the second build", p)
		}
	}
	ma, _ := os.ReadFile(filepath.Join(a, ManifestName))
	mb, _ := os.ReadFile(filepath.Join(b, ManifestName))
	if !bytes.Equal(ma, mb) {
		t.Error("manifest.json differs")
	}
	// Fixed mtimes: a tar or rsync -t of the dir is the same too.
	for _, d := range []string{a, b} {
		filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := de.Info(); !fi.ModTime().Equal(BuildMtime) {
				t.Errorf("%s mtime %v, want %v", p, fi.ModTime(), BuildMtime)
			}
			return nil
		})
	}
}

func TestBuildFromDirErrors(t *testing.T) {
	src := srcTree(t)
	kubelet := kubeletPath(testComponents)
	os.Remove(filepath.Join(src, kubelet))
	if _, _, err := build(t, BuildOptions{FromDir: src}); err == nil || !strings.Contains(err.Error(), "has neither "+kubelet) {
		t.Fatalf("missing file: %v", err)
	}
	src = srcTree(t)
	put(t, src, kubelet+".sha256", []byte(strings.Repeat("0", 64)+"  kubelet\n"))
	if _, _, err := build(t, BuildOptions{FromDir: src}); err == nil || !strings.Contains(err.Error(), "kubelet.sha256 0000") {
		t.Fatalf("mirror checksum mismatch: %v", err)
	}
	out := t.TempDir()
	put(t, out, "x", nil)
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: out}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("non-empty output: %v", err)
	}
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), Arch: "arm64"}); runtime.GOARCH == "amd64" && (err == nil || !strings.Contains(err.Error(), "disagrees")) {
		t.Fatalf("arch conflict: %v", err)
	}
}

func TestBuildOnline(t *testing.T) {
	srv, _ := fakeUpstream(t, testComponents, "")
	pulled := 0
	out := filepath.Join(t.TempDir(), "b")
	_, notes, err := build(t, BuildOptions{OutputDir: out, Upstream: Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"},
		PullImage: func(_ context.Context, ref, arch, dst string) error {
			pulled++
			return os.WriteFile(dst, pauseTar, 0o600)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if pulled != 1 {
		t.Errorf("pulled %d images", pulled)
	}
	// An image pulled by tag is not reproducible: said in one line.
	if len(notes) != 1 || strings.Contains(notes[0], "\n") || !strings.Contains(notes[0], "registry.k8s.io/pause:3.10 is pulled by tag only") {
		t.Errorf("notes = %q, want one tag-only note", notes)
	}
	pinned := testSpec()
	pinned.Images[0].Ref += "@sha256:" + strings.Repeat("a", 64)
	_, notes, err = build(t, BuildOptions{Spec: pinned, Upstream: Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"},
		PullImage: func(_ context.Context, ref, arch, dst string) error { return os.WriteFile(dst, pauseTar, 0o600) }})
	if err != nil || len(notes) != 0 {
		t.Errorf("pinned image: notes %q, %v", notes, err)
	}
	if ps := Verify(context.Background(), out, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	// Online and offline builds of the same content are the same bundle.
	off := filepath.Join(t.TempDir(), "b")
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: off}); err != nil {
		t.Fatal(err)
	}
	sa, sb := snapshot(t, out), snapshot(t, off)
	for p, v := range sa {
		if sb[p] != v {
			t.Errorf("%s differs between online and --from-dir builds", p)
		}
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"schemaVersion":1,"components":{"kubernetes":"v1.35.0","containerd":"1.7.0","runc":"1.3.0","cni":"1.6.2"}}`, "components.kubernetes: \"v1.35.0\" is not a version"},
		{`{"schemaVersion":1,"components":{"kubernetes":"1.35.0","containerd":"1.7.0","runc":"1.3.0"}}`, "components.cni: is required"},
		{`{"schemaVersion":1,"arch":"s390x","components":{"kubernetes":"1.35.0","containerd":"1.7.0","runc":"1.3.0","cni":"1"}}`, "arch: \"s390x\""},
		{`{"schemaVersion":1,"components":{"kubernetes":"1.35.0","containerd":"1.7.0","runc":"1.3.0","cni":"1.6.2"},"images":[{"path":"../x.tar","ref":"a/b:c"}]}`, "images[0].path"},
		{`{"schemaVersion":1,"components":{"kubernetes":"1.35.0","containerd":"1.7.0","runc":"1.3.0","cni":"1.6.2"},"images":[{"path":"images/p.tar","ref":"Not A Ref"}]}`, "images[0].ref"},
		{`{"schemaVersion":1,"components":{"kubernetes":1}}`, "components.kubernetes: number"},
		{`{"schemaVersion":1,"extra":true}`, `unknown field "extra"`},
	} {
		if _, err := ParseSpec("spec.json", []byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseSpec("spec.json", []byte(`{"schemaVersion":1,"components":{"kubernetes":"1.35.0","containerd":"1.7.0","runc":"1.3.0","cni":"1.6.2","crictl":"1.34.0"},"images":[{"path":"images/pause.tar","ref":"registry.k8s.io/pause:3.10"}]}`)); err != nil {
		t.Fatal(err)
	}
}

// A `wget -x` mirror of the upstream release URLs is a valid --from-dir:
// components at their mirrored URL paths, checked against the mirrored
// upstream checksum files; it builds the same bundle.
func TestBuildFromMirror(t *testing.T) {
	pl := payloads(t, testComponents)
	mirror := t.TempDir()
	for _, d := range UpstreamURLs(testComponents, runtime.GOARCH) {
		body := pl[d.Path]
		put(t, mirror, MirrorPath(d.URL), body)
		sum := sumHex(body)
		switch d.Component {
		case Kubelet, Kubectl:
			put(t, mirror, MirrorPath(d.SHA256URL), []byte(sum)) // bare, as dl.k8s.io has it
		default:
			put(t, mirror, MirrorPath(d.SHA256URL), []byte(strings.Repeat("1", 64)+"  other-file\n"+sum+"  "+filepath.Base(d.URL)+"\n"))
		}
	}
	put(t, mirror, "images/pause.tar", pl["images/pause.tar"])
	out := filepath.Join(t.TempDir(), "b")
	if _, _, err := build(t, BuildOptions{FromDir: mirror, OutputDir: out}); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(t.TempDir(), "b")
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: ref}); err != nil {
		t.Fatal(err)
	}
	sa, sb := snapshot(t, out), snapshot(t, ref)
	if len(sa) != len(sb) {
		t.Errorf("%d entries from the mirror, %d from the bundle layout", len(sa), len(sb))
	}
	for p, v := range sa {
		if sb[p] != v {
			t.Errorf("%s differs", p)
		}
	}
	// A mirrored file that does not match its mirrored checksum is refused.
	runc := UpstreamURLs(testComponents, runtime.GOARCH)[3]
	put(t, mirror, MirrorPath(runc.URL), []byte("not runc"))
	if _, _, err := build(t, BuildOptions{FromDir: mirror}); err == nil || !strings.Contains(err.Error(), "runc.sha256sum") {
		t.Fatalf("err = %v", err)
	}
	os.Remove(filepath.Join(mirror, MirrorPath(runc.SHA256URL)))
	if _, _, err := build(t, BuildOptions{FromDir: mirror}); err == nil || !strings.Contains(err.Error(), "needs its mirrored checksum file") {
		t.Fatalf("err = %v", err)
	}
}

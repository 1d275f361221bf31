package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// upstreamManifestJSON is a manifest.json as upstream's builder writes it:
// versions (Kubernetes with its "v"), image references, no schemaVersion.
const upstreamManifestJSON = `{
  "versions": {
    "kubernetes": "v1.35.0",
    "containerd": "1.6.20",
    "runc": "1.3.0",
    "cni": "1.6.2",
    "crictl": "1.35.0"
  },
  "containerImages": [
    "registry.k8s.io/pause:3.10"
  ]
}
`

// upstreamFiles is upstream's documented file list for testComponents on
// this arch, written out here rather than derived from UpstreamPaths, so
// that the reader is checked against the layout and not against itself.
func upstreamFiles(t *testing.T) map[string][]byte {
	a := runtime.GOARCH
	native := payloads(t, testComponents)
	np := BundlePaths(testComponents, a)
	ref := "registry.k8s.io/pause:3.10"
	sum := sha256.Sum256([]byte(ref))
	return map[string][]byte{
		"kubernetes/v1.35.0/bin/linux/" + a + "/kubelet":                                 native[np[Kubelet]],
		"kubernetes/v1.35.0/bin/linux/" + a + "/kubectl":                                 native[np[Kubectl]],
		"kubernetes/v1.35.0/bin/linux/" + a + "/kube-proxy":                              []byte("kube-proxy 1.35.0"),
		"containerd/v1.6.20/containerd-1.6.20-linux-" + a + ".tar.gz":                    native[np[Containerd]],
		"runc/v1.3.0/runc." + a:                                                          native[np[Runc]],
		"cni/v1.6.2/cni-plugins-linux-" + a + "-v1.6.2.tgz":                              native[np[CNI]],
		"crictl/v1.35.0/crictl-v1.35.0-linux-" + a + ".tar.gz":                           native[np[Crictl]],
		fmt.Sprintf("container-images/%s/registry.k8s.io_pause_3.10-%x.tar", a, sum[:6]): pauseTar,
	}
}

// makeUpstreamBundle writes an upstream bundle: each file with its .sha256
// as upstream has them (the Kubernetes binaries' as dl.k8s.io publishes
// them, the bare hex; the others "<hex>  <name>" as its builder writes).
func makeUpstreamBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for rel, data := range upstreamFiles(t) {
		put(t, dir, rel, data)
		side := sumHex(data) + "  " + filepath.Base(rel) + "\n"
		if strings.HasPrefix(rel, "kubernetes/") {
			side = sumHex(data)
		}
		put(t, dir, rel+".sha256", []byte(side))
	}
	put(t, dir, ManifestName, []byte(upstreamManifestJSON))
	return dir
}

func TestDetectLayout(t *testing.T) {
	for _, c := range []struct{ data, want, err string }{
		{upstreamManifestJSON, LayoutUpstream, ""},
		{`{"schemaVersion":1,"arch":"amd64","components":{},"files":[]}`, LayoutNative, ""},
		{`{"files":[]}`, LayoutNative, ""},
		{`{"versions":{},"files":[]}`, LayoutNative, ""},
		{`{"arch":"amd64"}`, "", "neither layout"},
		{`[1]`, "", "cannot unmarshal"},
	} {
		got, err := DetectLayout("m.json", []byte(c.data))
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("DetectLayout(%s) = %q, %v; want %q, %q", c.data, got, err, c.want, c.err)
		}
	}
}

func TestUpstreamBundleVerifies(t *testing.T) {
	dir := makeUpstreamBundle(t)
	m, ps := VerifyFor(context.Background(), dir, testComponents, runtime.GOARCH)
	if len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	wantComps := testComponents
	wantComps.KubeProxy = true // upstream's layout always carries it
	if m.Layout != LayoutUpstream || m.Arch != runtime.GOARCH || m.Components != wantComps {
		t.Fatalf("manifest: layout %q arch %q components %+v", m.Layout, m.Arch, m.Components)
	}
	want := upstreamFiles(t)
	if len(m.Files) != len(want) {
		t.Fatalf("%d files, want %d: %+v", len(m.Files), len(want), m.Files)
	}
	for _, f := range m.Files {
		data, ok := want[f.Path]
		if !ok || f.SHA256 != sumHex(data) || f.Size != int64(len(data)) {
			t.Errorf("file %+v: not upstream's, or not its sidecar's sum and size", f)
		}
	}
	if len(m.Images) != 1 || m.Images[0].Ref != "registry.k8s.io/pause:3.10" || m.File(m.Images[0].Path) == nil {
		t.Errorf("images %+v", m.Images)
	}
	if kp := m.File("kubernetes/v1.35.0/bin/linux/" + runtime.GOARCH + "/kube-proxy"); kp == nil || kp.Component != KubeProxy {
		t.Errorf("kube-proxy: %+v", kp)
	}
	// The config's versions are compared with the manifest's as for ours.
	_, ps = VerifyFor(context.Background(), dir, Components{Containerd: "2.0.0"}, runtime.GOARCH)
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "manifest containerd 1.6.20 != config components.containerd 2.0.0") {
		t.Errorf("version mismatch: %v", ps)
	}
}

// One byte of the kubelet changed: refused, naming the kubelet and the
// sidecar it does not match, and nothing is installed.
func TestUpstreamTamperedKubelet(t *testing.T) {
	dir := makeUpstreamBundle(t)
	rel := "kubernetes/v1.35.0/bin/linux/" + runtime.GOARCH + "/kubelet"
	p := filepath.Join(dir, rel)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[3] ^= 0x20
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ps := Verify(context.Background(), dir, testComponents)
	if len(ps) != 1 || ps[0].Path != p || !strings.Contains(ps[0].Msg, "!= kubelet.sha256 "+sumHex(upstreamFiles(t)[rel])) {
		t.Fatalf("problems: %v", ps)
	}
	root := t.TempDir()
	if _, err := Install(context.Background(), dir, root, nil); err == nil || !strings.Contains(err.Error(), rel) {
		t.Fatalf("install: %v", err)
	}
	if des, _ := os.ReadDir(root); len(des) != 0 {
		t.Errorf("install wrote into the machine: %v", des)
	}
}

// Every file of upstream's list is needed: one missing (kube-proxy), or a
// missing or wrong sidecar, is a problem naming that file.
func TestUpstreamMissingFiles(t *testing.T) {
	a := runtime.GOARCH
	for _, c := range []struct {
		name, rel string
		change    func(dir, rel string)
		want      string
	}{
		{"no kube-proxy", "kubernetes/v1.35.0/bin/linux/" + a + "/kube-proxy", func(dir, rel string) { os.Remove(filepath.Join(dir, rel)) }, "but it is unreadable"},
		{"no sidecar", "runc/v1.3.0/runc." + a, func(dir, rel string) { os.Remove(filepath.Join(dir, rel+".sha256")) }, ".sha256: "},
		{"wrong sidecar", "cni/v1.6.2/cni-plugins-linux-" + a + "-v1.6.2.tgz", func(dir, rel string) {
			os.WriteFile(filepath.Join(dir, rel+".sha256"), []byte(strings.Repeat("0", 64)), 0o644)
		}, "!= cni-plugins-linux-" + a + "-v1.6.2.tgz.sha256 0000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := makeUpstreamBundle(t)
			c.change(dir, c.rel)
			ps := Verify(context.Background(), dir, Components{})
			if len(ps) != 1 || !strings.Contains(ps[0].Error(), c.rel) || !strings.Contains(ps[0].Error(), c.want) {
				t.Fatalf("problems: %v", ps)
			}
		})
	}
}

// Install puts upstream's components where it puts ours, kube-proxy
// next to the kubelet.
func TestUpstreamInstall(t *testing.T) {
	dir := makeUpstreamBundle(t)
	root := t.TempDir()
	if _, err := Install(context.Background(), dir, root, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/local/bin/kubelet", "usr/local/bin/kube-proxy", "usr/local/bin/containerd", "usr/local/bin/crictl", "usr/local/sbin/runc", "opt/cni/bin/bridge"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s not installed: %v", p, err)
		}
	}
}

func TestUpstreamManifestErrors(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"unknown key", `{"versions":{"kubernetes":"1.35.0","containerd":"1.6.20","runc":"1.3.0","cni":"1.6.2","crictl":"1.35.0"},"containerImages":[],"npd":"x"}`, `unknown field "npd"`},
		{"no crictl", `{"versions":{"kubernetes":"1.35.0","containerd":"1.6.20","runc":"1.3.0","cni":"1.6.2"}}`, "versions.crictl: is required"},
		{"path in a version", `{"versions":{"kubernetes":"1.35.0/../../x","containerd":"1.6.20","runc":"1.3.0","cni":"1.6.2","crictl":"1.35.0"}}`, "versions.kubernetes: \"1.35.0/../../x\" is not a version"},
		{"schema 2", `{"schemaVersion":2,"versions":{"kubernetes":"1.35.0","containerd":"1.6.20","runc":"1.3.0","cni":"1.6.2","crictl":"1.35.0"}}`, "schemaVersion: 2 is not supported"},
		{"bad image", `{"versions":{"kubernetes":"1.35.0","containerd":"1.6.20","runc":"1.3.0","cni":"1.6.2","crictl":"1.35.0"},"containerImages":["../x"]}`, `containerImages[0]: "../x" is not an image reference`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := makeUpstreamBundle(t)
			put(t, dir, ManifestName, []byte(c.data))
			ps := Verify(context.Background(), dir, Components{})
			if len(ps) != 1 || !strings.Contains(ps[0].Error(), c.want) || !strings.Contains(ps[0].Error(), "upstream's layout") {
				t.Fatalf("problems: %v", ps)
			}
		})
	}
	// A registry's manifest (ParseManifest) must be ours: upstream's is
	// named, not reported as an unknown field.
	if _, err := ParseManifest("oci://r/b:t manifest.json", []byte(upstreamManifestJSON)); err == nil || !strings.Contains(err.Error(), "upstream's layout") {
		t.Errorf("ParseManifest: %v", err)
	}
}

// Several arches in one upstream dir: the host's is read; none of them
// the host's is an error naming what is there.
func TestUpstreamArch(t *testing.T) {
	dir := makeUpstreamBundle(t)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	put(t, dir, "kubernetes/v1.35.0/bin/linux/"+other+"/kubelet", []byte("x"))
	if m, ps := VerifyFor(context.Background(), dir, Components{}, runtime.GOARCH); len(ps) > 0 || m.Arch != runtime.GOARCH {
		t.Fatalf("two arches: %v", Problems(ps))
	}
	os.RemoveAll(filepath.Join(dir, "kubernetes/v1.35.0/bin/linux", runtime.GOARCH))
	put(t, dir, "kubernetes/v1.35.0/bin/linux/riscv64/kubelet", []byte("x"))
	ps := Verify(context.Background(), dir, Components{})
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "not this host's "+runtime.GOARCH) {
		t.Fatalf("problems: %v", ps)
	}
}

// The verification record serves an upstream bundle as it serves ours.
func TestUpstreamVerificationRecord(t *testing.T) {
	ctx := context.Background()
	dir := makeUpstreamBundle(t)
	s := recordStager(t, "")
	if v, err := s.VerifyQuick(ctx, dir); err != nil || !v.Now {
		t.Fatalf("first: %+v %v", v, err)
	}
	again := recordStager(t, s.Layout.Root())
	var v Verification
	var err error
	if n := hashedBy(func() { v, err = again.VerifyQuick(ctx, dir) }); err != nil || v.Now || n != 0 {
		t.Fatalf("unchanged: %+v %v, %d bytes hashed", v, err, n)
	}
}

// Build writes upstream's layout from our source tree, byte for byte the
// same twice; that bundle is a --from-dir for a native build, which
// verifies too: build converts between the layouts.
func TestBuildUpstreamLayout(t *testing.T) {
	src := srcTree(t)
	put(t, src, "kubernetes/v1.35.0/bin/linux/"+runtime.GOARCH+"/kube-proxy", []byte("kube-proxy 1.35.0"))
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	for _, out := range []string{a, b} {
		m, _, err := build(t, BuildOptions{FromDir: src, OutputDir: out, Layout: LayoutUpstream})
		if err != nil {
			t.Fatal(err)
		}
		if m.Layout != LayoutUpstream || len(m.Files) != 8 {
			t.Fatalf("built %q with %d files", m.Layout, len(m.Files))
		}
	}
	sa, sb := snapshot(t, a), snapshot(t, b)
	for p, v := range sa {
		if sb[p] != v {
			t.Errorf("%s differs between two builds", p)
		}
	}
	got, _ := os.ReadFile(filepath.Join(a, ManifestName))
	if string(got) != upstreamManifestJSON {
		t.Errorf("manifest.json:\n%s\nwant upstream's:\n%s", got, upstreamManifestJSON)
	}
	for rel, data := range upstreamFiles(t) {
		if b, err := os.ReadFile(filepath.Join(a, rel)); err != nil || !bytes.Equal(b, data) {
			t.Errorf("%s: %v", rel, err)
		}
	}
	if ps := Verify(context.Background(), a, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	native := filepath.Join(t.TempDir(), "n")
	m, _, err := build(t, BuildOptions{FromDir: makeUpstreamBundle(t), OutputDir: native})
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout != LayoutNative {
		t.Errorf("layout %q", m.Layout)
	}
	if ps := Verify(context.Background(), native, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
}

func TestBuildLayoutErrors(t *testing.T) {
	noCrictl := testSpec()
	noCrictl.Components.Crictl = ""
	for _, c := range []struct {
		name string
		o    BuildOptions
		want string
	}{
		{"unknown", BuildOptions{Layout: "flat"}, `layout "flat" is not native or upstream`},
		{"no crictl", BuildOptions{Layout: LayoutUpstream, Spec: noCrictl}, "needs crictl"},
		{"worker image", BuildOptions{Layout: LayoutUpstream, WorkerImage: "/w"}, "no place for a worker image"},
		{"legal", BuildOptions{Layout: LayoutUpstream, LegalDir: "/l"}, "no place for legal files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.FromDir = srcTree(t)
			if _, _, err := build(t, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

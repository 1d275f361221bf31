package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
	"github.com/Azure/aks-flex-node/internal/transport"
)

var testComponents = Components{Kubernetes: "1.35.0", Containerd: "1.6.20", Runc: "1.3.0", CNI: "1.6.2", Crictl: "1.35.0"}

// pauseTar is a minimal docker-save archive: what Verify reads as an image.
var pauseTar = func() []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct{ name, body string }{
		{"manifest.json", `[{"Config":"config.json","RepoTags":["registry.k8s.io/pause:3.10"],"Layers":[]}]`},
		{"config.json", `{}`},
	} {
		tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
		tw.Write([]byte(m.body))
	}
	tw.Close()
	return buf.Bytes()
}()

type member struct {
	name, body string
	mode       int64
}

func tgz(t *testing.T, members ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Mode: m.mode, Size: int64(len(m.body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(m.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m.body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func put(t *testing.T, dir, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// payloads are the fake release files, by bundle path.
func payloads(t *testing.T, c Components) map[string][]byte {
	p := BundlePaths(c, runtime.GOARCH)
	return map[string][]byte{
		p[Kubelet]: []byte("kubelet " + c.Kubernetes),
		p[Kubectl]: []byte("kubectl " + c.Kubernetes),
		p[Containerd]: tgz(t,
			member{"bin/", "", 0o755},
			member{"bin/containerd", "containerd", 0o755},
			member{"bin/containerd-shim-runc-v2", "shim", 0o755},
			member{"bin/ctr", "ctr", 0o755},
		),
		p[Runc]: []byte("runc"),
		p[CNI]: tgz(t,
			member{"./", "", 0o755},
			member{"./bridge", "bridge", 0o755},
			member{"./host-local", "host-local", 0o755},
			member{"./loopback", "loopback", 0o755},
			member{"./LICENSE", "license", 0o644},
		),
		p[Crictl]:          tgz(t, member{"crictl", "crictl", 0o755}),
		"images/pause.tar": pauseTar,
	}
}

func makeBundle(t *testing.T, c Components) string {
	t.Helper()
	dir := t.TempDir()
	for rel, data := range payloads(t, c) {
		put(t, dir, rel, data)
	}
	m, err := BuildManifest(context.Background(), dir, runtime.GOARCH, c, []Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kubeletPath(c Components) string { return BundlePaths(c, runtime.GOARCH)[Kubelet] }

func TestResolveSource(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/srv/bundles/{{ .KubernetesVersion }}", "/srv/bundles/1.35.0"},
		{"file:///srv/b/v{{.KubernetesVersion}}/", "/srv/b/v1.35.0"},
		{"oci://mirror/bundles:{{ .KubernetesVersion }}", "oci://mirror/bundles:1.35.0"},
	} {
		got, err := ResolveSource(tc.in, "1.35.0")
		if err != nil || got != tc.want {
			t.Errorf("ResolveSource(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"relative/{{ .KubernetesVersion }}", "/x/{{ .Nope }}", "/x/{{"} {
		if _, err := ResolveSource(bad, "1.35.0"); err == nil {
			t.Errorf("ResolveSource(%q) accepted", bad)
		}
	}
}

func TestVerifyOK(t *testing.T) {
	dir := makeBundle(t, testComponents)
	m, err := LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Arch != runtime.GOARCH || len(m.Files) != 7 || m.Files[0].Path > m.Files[1].Path {
		t.Fatalf("manifest %+v", m)
	}
	want := Components{Kubernetes: "1.35.0", Containerd: "1.6.20", Runc: "v1.3.0", CNI: "1.6.2"}
	if ps := Verify(context.Background(), dir, want); len(ps) != 0 {
		t.Fatalf("problems: %v", Problems(ps))
	}
}

func TestVerifyVersionMismatch(t *testing.T) {
	dir := makeBundle(t, testComponents)
	ps := Verify(context.Background(), dir, Components{Kubernetes: "1.35.0", Containerd: "1.7.28", CNI: "1.5.0"})
	err := Problems(ps)
	if err == nil {
		t.Fatal("mismatch not reported")
	}
	for _, want := range []string{
		"manifest containerd 1.6.20 != config components.containerd 1.7.28",
		"manifest cni 1.6.2 != config networking.cniVersion 1.5.0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	if len(ps) != 2 {
		t.Errorf("want 2 problems, got %v", ps)
	}
}

func TestTamperedKubeletFailsBeforeInstall(t *testing.T) {
	dir := makeBundle(t, testComponents)
	p := filepath.Join(dir, kubeletPath(testComponents))
	b, _ := os.ReadFile(p)
	b[0] ^= 1
	os.WriteFile(p, b, 0o644)

	ps := Verify(context.Background(), dir, Components{})
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "kubernetes/v1.35.0/bin/linux/"+runtime.GOARCH+"/kubelet: sha256 ") {
		t.Fatalf("problems: %v", ps)
	}
	machineRoot := t.TempDir()
	_, err := Install(context.Background(), dir, machineRoot, nil)
	if err == nil || !strings.Contains(err.Error(), "kubernetes/v1.35.0/bin/linux/"+runtime.GOARCH+"/kubelet") {
		t.Fatalf("install err = %v", err)
	}
	if entries, _ := os.ReadDir(machineRoot); len(entries) != 0 {
		t.Fatalf("install wrote into the machine before failing: %v", entries)
	}
}

// A tarball replaced between verification and install installs none of
// its members: they are unpacked to temp files and renamed only once the
// tarball hashed to the verified checksum.
func TestInstallTarballChangedAfterVerify(t *testing.T) {
	ctx := context.Background()
	dir := makeBundle(t, testComponents)
	m, ps := VerifyFor(ctx, dir, testComponents, runtime.GOARCH)
	if len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	rel := BundlePaths(testComponents, runtime.GOARCH)[Containerd]
	put(t, dir, rel, tgz(t, member{"bin/containerd", "evil", 0o755}, member{"bin/ctr", "evil", 0o755}))
	root := t.TempDir()
	_, err := InstallVerified(ctx, dir, m, root, nil)
	if err == nil || !strings.Contains(err.Error(), rel) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "changed after verification") {
		t.Errorf("err = %v, want it to say the tarball changed after verification", err)
	}
	bin := filepath.Join(root, "usr/local/bin")
	for _, n := range []string{"containerd", "ctr"} {
		if _, err := os.Lstat(filepath.Join(bin, n)); !os.IsNotExist(err) {
			t.Errorf("%s from the changed tarball was installed: %v", n, err)
		}
	}
	des, _ := os.ReadDir(bin)
	for _, de := range des {
		if strings.Contains(de.Name(), ".tmp-") {
			t.Errorf("temp file left: %s", de.Name())
		}
	}
}

func TestVerifySidecarAndMissingFiles(t *testing.T) {
	dir := makeBundle(t, testComponents)
	runc := BundlePaths(testComponents, runtime.GOARCH)[Runc]
	os.WriteFile(filepath.Join(dir, runc+".sha256"), []byte(strings.Repeat("0", 64)+"  runc\n"), 0o644)
	ps := Verify(context.Background(), dir, Components{})
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), runc+": sha256") || !strings.Contains(ps[0].Error(), ".sha256 0000") {
		t.Fatalf("sidecar mismatch: %v", ps)
	}

	dir = makeBundle(t, testComponents)
	os.Remove(filepath.Join(dir, "images/pause.tar"))
	ps = Verify(context.Background(), dir, Components{})
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), "images/pause.tar") {
		t.Fatalf("missing image: %v", ps)
	}
}

func TestLoadManifestRejectsEscapes(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, ManifestName, []byte(`{"schemaVersion":1,"arch":"amd64","components":{},"files":[
		{"path":"../../etc/shadow","sha256":"`+strings.Repeat("a", 64)+`","size":1,"component":"kubelet"}],"images":[],"legal":[]}`))
	if _, err := LoadManifest(dir); err == nil || !strings.Contains(err.Error(), "files[0].path") {
		t.Fatalf("err = %v", err)
	}
	put(t, dir, ManifestName, []byte(`{"schemaVersion":1,"arch":"amd64","extra":1}`))
	if _, err := LoadManifest(dir); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestInstallIdempotent(t *testing.T) {
	ctx := context.Background()
	dir := makeBundle(t, testComponents)
	root := t.TempDir()
	res, err := Install(ctx, dir, root, nil)
	if err != nil || !res.Changed {
		t.Fatalf("%+v %v", res, err)
	}
	for p, want := range map[string]string{
		"usr/local/bin/kubelet":                  "kubelet 1.35.0",
		"usr/local/bin/kubectl":                  "kubectl 1.35.0",
		"usr/local/bin/containerd":               "containerd",
		"usr/local/bin/containerd-shim-runc-v2":  "shim",
		"usr/local/bin/ctr":                      "ctr",
		"usr/local/bin/crictl":                   "crictl",
		"usr/local/sbin/runc":                    "runc",
		"opt/cni/bin/bridge":                     "bridge",
		"opt/cni/bin/host-local":                 "host-local",
		"opt/cni/bin/loopback":                   "loopback",
		"var/lib/aks-flex-node/images/pause.tar": string(pauseTar),
	} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", p, b, err)
			continue
		}
		fi, _ := os.Stat(filepath.Join(root, p))
		mode := os.FileMode(0o755)
		if strings.HasSuffix(p, ".tar") {
			mode = 0o644
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode %v", p, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(root, "opt/cni/bin/LICENSE")); err == nil {
		t.Error("LICENSE installed as a plugin")
	}
	// The units and configs node renders run what was installed here.
	for _, p := range []string{node.KubeletBinary, node.ContainerdBinary, node.CtrBinary, node.RuncBinary, nodedirs.CNIBin + "/bridge"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("node names %s, which Install did not write: %v", p, err)
		}
	}
	if archives, err := node.ImageArchives(root); err != nil || len(archives) != 1 {
		t.Errorf("node finds image archives %q, %v; want the one installed", archives, err)
	}
	kubelet := filepath.Join(root, "usr/local/bin/kubelet")
	old := time.Unix(1000, 0)
	os.Chtimes(kubelet, old, old)
	os.Chtimes(filepath.Join(root, "opt/cni/bin/bridge"), old, old)

	res, err = Install(ctx, dir, root, nil)
	if err != nil || res.Changed {
		t.Fatalf("re-run: %+v %v", res, err)
	}
	for _, p := range []string{kubelet, filepath.Join(root, "opt/cni/bin/bridge")} {
		if fi, _ := os.Stat(p); !fi.ModTime().Equal(old) {
			t.Errorf("%s rewritten on a converged run", p)
		}
	}
	var tmps []string
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		if strings.Contains(filepath.Base(p), ".tmp-") {
			tmps = append(tmps, p)
		}
		return nil
	})
	if len(tmps) > 0 {
		t.Errorf("temp files left: %v", tmps)
	}

	os.WriteFile(kubelet, []byte("drifted"), 0o755)
	os.Chmod(filepath.Join(root, "usr/local/sbin/runc"), 0o644)
	res, err = Install(ctx, dir, root, nil)
	if err != nil || !res.Changed || !strings.Contains(res.Detail, "2 changed") {
		t.Fatalf("repair: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(kubelet); string(b) != "kubelet 1.35.0" {
		t.Errorf("kubelet not repaired: %q", b)
	}
}

func TestInstallStaysInsideMachineRoot(t *testing.T) {
	dir := makeBundle(t, testComponents)
	base := t.TempDir()
	root, outside := filepath.Join(base, "rootfs"), filepath.Join(base, "host-usr")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(outside, 0o755)
	// A rootfs whose usr is a link to an absolute host path.
	os.Symlink(outside, filepath.Join(root, "usr"))
	if _, err := Install(context.Background(), dir, root, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("install wrote through a rootfs link to the host: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, outside, "local/bin/kubelet")); err != nil {
		t.Fatal(err)
	}
}

func TestInstallNeedsRootfs(t *testing.T) {
	dir := makeBundle(t, testComponents)
	if _, err := Install(context.Background(), dir, filepath.Join(t.TempDir(), "missing"), nil); err == nil || !strings.Contains(err.Error(), "provision") {
		t.Fatalf("err = %v", err)
	}
}

func TestUpstreamURLs(t *testing.T) {
	got := UpstreamURLs(testComponents, "amd64")
	want := []Download{
		{Kubelet, "https://dl.k8s.io/release/v1.35.0/bin/linux/amd64/kubelet", "https://dl.k8s.io/release/v1.35.0/bin/linux/amd64/kubelet.sha256", "kubernetes/v1.35.0/bin/linux/amd64/kubelet"},
		{Kubectl, "https://dl.k8s.io/release/v1.35.0/bin/linux/amd64/kubectl", "https://dl.k8s.io/release/v1.35.0/bin/linux/amd64/kubectl.sha256", "kubernetes/v1.35.0/bin/linux/amd64/kubectl"},
		{Containerd, "https://github.com/containerd/containerd/releases/download/v1.6.20/containerd-1.6.20-linux-amd64.tar.gz", "https://github.com/containerd/containerd/releases/download/v1.6.20/containerd-1.6.20-linux-amd64.tar.gz.sha256sum", "containerd/v1.6.20/containerd-1.6.20-linux-amd64.tar.gz"},
		{Runc, "https://github.com/opencontainers/runc/releases/download/v1.3.0/runc.amd64", "https://github.com/opencontainers/runc/releases/download/v1.3.0/runc.sha256sum", "runc/v1.3.0/runc.amd64"},
		{CNI, "https://github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-linux-amd64-v1.6.2.tgz", "https://github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-linux-amd64-v1.6.2.tgz.sha256", "cni-plugins/v1.6.2/cni-plugins-linux-amd64-v1.6.2.tgz"},
		{Crictl, "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.35.0/crictl-v1.35.0-linux-amd64.tar.gz", "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.35.0/crictl-v1.35.0-linux-amd64.tar.gz.sha256", "cri-tools/v1.35.0/crictl-v1.35.0-linux-amd64.tar.gz"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d downloads", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got  %+v\nwant %+v", got[i], want[i])
		}
	}
}

func sumHex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// fakeUpstream serves the release files the way the real sites lay them
// out, with their checksum files, on a loopback test server.
func fakeUpstream(t *testing.T, c Components, corrupt string) (*httptest.Server, *sync.Map) {
	arch := runtime.GOARCH
	files := map[string][]byte{}
	pl := payloads(t, c)
	hits := &sync.Map{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hits.LoadOrStore(r.URL.Path, new(int))
		*(n.(*int))++
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	base := "http://" + srv.Listener.Addr().String()
	ds := Upstream{KubernetesURL: base, GitHubURL: base + "/gh"}.URLs(c, arch)
	for _, d := range ds {
		u := strings.TrimPrefix(d.URL, base)
		body := pl[d.Path]
		files[u] = body
		sum := sumHex(body)
		if d.Component == corrupt {
			files[u] = append([]byte("x"), body...)
		}
		su := strings.TrimPrefix(d.SHA256URL, base)
		switch d.Component {
		case Kubelet, Kubectl:
			files[su] = []byte(sum) // dl.k8s.io: bare hash
		case Runc:
			files[su] = append(files[su], []byte(strings.Repeat("1", 64)+"  runc.arm64\n"+sum+"  runc."+arch+"\n")...)
		default:
			files[su] = []byte(sum + "  " + filepathBase(d.URL) + "\n")
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, hits
}

func filepathBase(u string) string { return u[strings.LastIndex(u, "/")+1:] }

func TestFetch(t *testing.T) {
	ctx := context.Background()
	srv, hits := fakeUpstream(t, testComponents, "")
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("not loopback: %s", srv.URL)
	}
	up := Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"}
	ds := up.URLs(testComponents, runtime.GOARCH)
	dest := t.TempDir()
	if err := Fetch(ctx, transport.Policy{}, ds, dest); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if _, err := os.Stat(filepath.Join(dest, d.Path)); err != nil {
			t.Error(err)
		}
		if _, err := readSidecar(filepath.Join(dest, d.Path) + ".sha256"); err != nil {
			t.Errorf("%s sidecar: %v", d.Path, err)
		}
	}
	// The fetched tree plus images and a manifest is a bundle Verify accepts.
	put(t, dest, "images/pause.tar", pauseTar)
	m, err := BuildManifest(ctx, dest, runtime.GOARCH, testComponents, []Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}})
	if err != nil {
		t.Fatal(err)
	}
	WriteManifest(dest, m)
	if ps := Verify(ctx, dest, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}

	// Present and correct: only the checksum is fetched again.
	kubeletURL := strings.TrimPrefix(ds[0].URL, srv.URL)
	n, _ := hits.Load(kubeletURL)
	before := *(n.(*int))
	if err := Fetch(ctx, transport.Policy{}, ds, dest); err != nil {
		t.Fatal(err)
	}
	if n, _ := hits.Load(kubeletURL); *(n.(*int)) != before {
		t.Error("verified file downloaded again")
	}
}

func TestFetchRejectsChecksumMismatch(t *testing.T) {
	srv, _ := fakeUpstream(t, testComponents, Runc)
	ds := Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"}.URLs(testComponents, runtime.GOARCH)
	dest := t.TempDir()
	err := Fetch(context.Background(), transport.Policy{}, ds, dest)
	if err == nil || !strings.Contains(err.Error(), "fetch runc") || !strings.Contains(err.Error(), "runc.sha256sum") {
		t.Fatalf("err = %v", err)
	}
	runcDir := filepath.Join(dest, filepath.Dir(BundlePaths(testComponents, runtime.GOARCH)[Runc]))
	if entries, _ := os.ReadDir(runcDir); len(entries) != 0 {
		t.Fatalf("unverified download kept: %v", entries)
	}

	ds[0].URL += "-missing"
	if err := Fetch(context.Background(), transport.Policy{}, ds[:1], t.TempDir()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: %v", err)
	}
}

// An install killed half-way leaves its temp files next to their targets
// (the crash matrix found .kubelet.tmp-* in a converged node); the next
// install removes them.
func TestInstallRemovesTempFilesAKilledInstallLeft(t *testing.T) {
	ctx := context.Background()
	dir := makeBundle(t, testComponents)
	root := t.TempDir()
	stale := []string{
		"usr/local/bin/.kubelet.tmp-3134283897", "usr/local/sbin/.runc.tmp-1",
		"opt/cni/bin/.bridge.tmp-2", "var/lib/aks-flex-node/images/.pause.tar.tmp-3",
	}
	for _, p := range stale {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(root, "usr/local/bin/.hidden-but-not-ours")
	if err := os.WriteFile(keep, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(ctx, dir, root, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file that is not a temp file was removed: %v", err)
	}
}

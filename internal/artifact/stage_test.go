package artifact

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// testStager stages source for testComponents on a temp root with a
// prefix, logging at debug level into logs (nil discards).
func testStager(t *testing.T, source string, logs *bytes.Buffer) *Stager {
	t.Helper()
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	s := &Stager{Layout: l, Source: source, Want: testComponents, MachineRoot: filepath.Join(root, "var/lib/machines/kube1")}
	if logs != nil {
		s.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return s
}

// flipByte changes one byte of p in place.
func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// blobCountingRegistry is testRegistry counting the blobs it serves.
func blobCountingRegistry(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	blobGets := new(atomic.Int32)
	host := testRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				blobGets.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	return host, blobGets
}

func TestStageOCI(t *testing.T) {
	ctx := context.Background()
	host, blobGets := blobCountingRegistry(t)
	src := "oci://" + host + "/aks-flex/bootstrap-artifacts:k8s-{{ .KubernetesVersion }}"
	if _, err := (Registry{}).Push(ctx, builtBundle(t), strings.ReplaceAll(src, "{{ .KubernetesVersion }}", testComponents.Kubernetes)); err != nil {
		t.Fatal(err)
	}
	var tracked []string
	s := testStager(t, src, nil)
	s.Track = func(p ...string) error { tracked = append(tracked, p...); return nil }
	l := s.Layout
	stale := l.OnRoot(l.BundlesDir() + "/k8s-1.34.0")
	os.MkdirAll(stale, 0o755)

	st, err := s.Stage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := st.Dir
	if !st.Pulled || !strings.HasPrefix(dir, l.OnRoot("/var/lib/aks-flex-node/bundles/oci-")) {
		t.Fatalf("staged %+v, want pulled under the state dir", st)
	}
	// Then the verification record (record.go).
	if len(tracked) != 4 || tracked[0] != l.BundlesDir() || l.OnRoot(tracked[1]) != dir || tracked[2] != l.StateDir()+"/"+RecordDir {
		t.Errorf("tracked %q before creating %s", tracked, dir)
	}
	if ps := Verify(ctx, dir, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	first := blobGets.Load()
	if first == 0 {
		t.Fatal("nothing downloaded")
	}
	// Same artifact digest: only the index is read again, no file.
	if again, err := s.Stage(ctx); err != nil || again.Dir != dir || again.Pulled {
		t.Fatalf("second stage: %+v %v", again, err)
	}
	if n := blobGets.Load() - first; n != 1 { // the bundle manifest (config blob)
		t.Errorf("second stage fetched %d blobs, want 1 (manifest.json)", n)
	}
	// A staged file corrupted on disk is caught at stage time (not at
	// install, after the host changed) and the bundle is pulled again.
	flipByte(t, filepath.Join(dir, kubeletPath(testComponents)))
	before := blobGets.Load()
	if again, err := s.Stage(ctx); err != nil || again.Dir != dir || !again.Pulled {
		t.Fatalf("stage over a corrupted staged bundle: %+v %v", again, err)
	}
	if ps := Verify(ctx, dir, testComponents); len(ps) > 0 {
		t.Fatalf("corrupted staged bundle kept: %v", Problems(ps))
	}
	if blobGets.Load()-before < 2 {
		t.Errorf("corrupted staged bundle not pulled again")
	}
	if err := s.RemoveStale(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale staged bundle kept: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("current staged bundle removed: %v", err)
	}

	// A config asking for another version is refused before any download.
	s.Want.Runc = "1.3.1"
	before = blobGets.Load()
	if _, err := s.Stage(ctx); err == nil || !strings.Contains(err.Error(), "manifest runc 1.3.0 != config components.runc 1.3.1") {
		t.Fatalf("err = %v", err)
	}
	if n := blobGets.Load() - before; n != 1 {
		t.Errorf("a refused stage fetched %d blobs", n)
	}
}

// A registry bundle is hashed once on a first start (after the pull) and
// not at all on a converged re-run, though it is verified at stage time.
func TestStageOCIVerifiesOnce(t *testing.T) {
	ctx := context.Background()
	src := "oci://" + testRegistry(t, nil) + "/aks-flex/bootstrap-artifacts:k8s-" + testComponents.Kubernetes
	if _, err := (Registry{}).Push(ctx, builtBundle(t), src); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := testStager(t, src, &logs)
	if err := os.MkdirAll(s.MachineRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Install(ctx, st.Dir); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 1 {
		t.Errorf("first start verified the bundle %d times, want 1:\n%s", n, logs.String())
	}
	// A converged re-run, in a new process (a new Stager).
	logs.Reset()
	s2 := *s
	s2.verified = nil
	st, err = s2.Stage(ctx)
	if err != nil || st.Pulled {
		t.Fatalf("converged stage: %+v %v", st, err)
	}
	if res, err := s2.Install(ctx, st.Dir); err != nil || res.Changed {
		t.Fatalf("converged install: %+v %v", res, err)
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 0 {
		t.Errorf("converged re-run verified the bundle %d times:\n%s", n, logs.String())
	}
}

func TestComponentsStampDetectsRewrites(t *testing.T) {
	s := testStager(t, "", nil)
	bundle := filepath.Join(t.TempDir(), "bundle")
	_ = os.MkdirAll(bundle, 0o755)
	f := filepath.Join(bundle, "kubelet")
	_ = os.WriteFile(f, []byte("v1"), 0o755)
	if s.Unchanged(bundle) {
		t.Fatal("no stamp yet, but unchanged")
	}
	if err := s.saveStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !s.Unchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree")
	}
	// Same size, mtime restored: ctime still moves, so it is caught.
	fi, _ := os.Stat(f)
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	_ = os.WriteFile(f, []byte("v2"), 0o755)
	_ = os.Chtimes(f, fi.ModTime(), fi.ModTime())
	if s.Unchanged(bundle) {
		t.Fatal("a rewritten file with its mtime restored went unnoticed")
	}
	// A new installed file in the machine is caught too.
	_ = s.saveStamp(bundle)
	mbin := filepath.Join(s.MachineRoot, nodedirs.Bin)
	_ = os.MkdirAll(mbin, 0o755)
	_ = os.WriteFile(filepath.Join(mbin, "extra"), nil, 0o755)
	if s.Unchanged(bundle) {
		t.Fatal("a new file in the machine went unnoticed")
	}
	// Asking for another version re-runs verification.
	_ = s.saveStamp(bundle)
	s.Want.Containerd = "9.9.9"
	if s.Unchanged(bundle) {
		t.Fatal("a changed component version went unnoticed")
	}
}

// A bundle dir that is a link is stamped where it points: walking the link
// itself stamps no file, and a tampered bundle would read as unchanged.
func TestComponentsStampFollowsBundleLinks(t *testing.T) {
	s := testStager(t, "", nil)
	root := t.TempDir()
	v1, v2 := filepath.Join(root, "v1"), filepath.Join(root, "v2")
	for _, d := range []string{v1, v2} {
		_ = os.MkdirAll(d, 0o755)
		_ = os.WriteFile(filepath.Join(d, "kubelet"), []byte("k1"), 0o644)
	}
	bundle := filepath.Join(root, "current")
	_ = os.Symlink(v1, bundle)
	if err := s.saveStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !s.Unchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree")
	}
	time.Sleep(20 * time.Millisecond)
	_ = os.WriteFile(filepath.Join(v1, "kubelet"), []byte("k2"), 0o644)
	if s.Unchanged(bundle) {
		t.Fatal("a rewritten file behind a linked bundle dir went unnoticed")
	}
	// Re-pointing the link at another tree with the same names.
	_ = s.saveStamp(bundle)
	_ = os.Remove(bundle)
	_ = os.Symlink(v2, bundle)
	if s.Unchanged(bundle) {
		t.Fatal("a re-pointed bundle link went unnoticed")
	}

	// A file in the bundle that is a link is stamped as its target.
	outside := filepath.Join(root, "kubelet.real")
	_ = os.WriteFile(outside, []byte("k1"), 0o644)
	_ = os.Remove(filepath.Join(v2, "kubelet"))
	_ = os.Symlink(outside, filepath.Join(v2, "kubelet"))
	if err := s.saveStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !s.Unchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree with a linked file")
	}
	time.Sleep(20 * time.Millisecond)
	_ = os.WriteFile(outside, []byte("k3"), 0o644)
	if s.Unchanged(bundle) {
		t.Fatal("a rewritten link target went unnoticed")
	}
	// A link that leads nowhere cannot be stamped: never "unchanged".
	_ = os.Remove(outside)
	if s.Unchanged(bundle) {
		t.Fatal("a dangling link in the bundle read as unchanged")
	}
}

// A pull killed half-way leaves a temp file next to the file it was
// writing (the crash matrix found .kubelet.tmp-* in a converged node's
// staged bundle); the resumed pull removes it.
func TestStageOCIRemovesTempFilesOfAKilledPull(t *testing.T) {
	ctx := context.Background()
	host := testRegistry(t, nil)
	src := "oci://" + host + "/aks-flex/bootstrap-artifacts:k8s-{{ .KubernetesVersion }}"
	if _, err := (Registry{}).Push(ctx, builtBundle(t), strings.ReplaceAll(src, "{{ .KubernetesVersion }}", testComponents.Kubernetes)); err != nil {
		t.Fatal(err)
	}
	s := testStager(t, src, nil)
	st, err := s.Stage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// As a kill during the pull leaves it: no marker, a temp file.
	if err := os.Remove(filepath.Join(st.Dir, StagedMarker)); err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(st.Dir, kubeletPath(testComponents))
	tmp := filepath.Join(filepath.Dir(kubelet), "."+filepath.Base(kubelet)+".tmp-1706900242")
	if err := os.WriteFile(tmp, []byte("half a kubelet"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stage(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the killed pull's temp file is still there: %v", err)
	}
}

// StagingNeed says what a stage would still pull: the whole bundle at
// first (its files and manifest, from the registry's manifests, no file
// downloaded), what is missing after a partial pull, nothing once staged.
func TestStagingNeed(t *testing.T) {
	ctx := context.Background()
	host, blobGets := blobCountingRegistry(t)
	ref := "oci://" + host + "/aks-flex/bootstrap-artifacts:k8s-" + testComponents.Kubernetes
	built := builtBundle(t)
	if _, err := (Registry{}).Push(ctx, built, ref); err != nil {
		t.Fatal(err)
	}
	var want uint64
	if err := filepath.WalkDir(built, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			want += uint64(fi.Size())
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := testStager(t, ref, nil)
	need, err := s.StagingNeed(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if need != want {
		t.Errorf("need before a pull %d bytes, the bundle is %d", need, want)
	}
	if n := blobGets.Load(); n != 1 { // the bundle manifest (config blob)
		t.Errorf("StagingNeed fetched %d blobs, want 1 (manifest.json)", n)
	}
	st, err := s.Stage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if need, err := s.StagingNeed(ctx, ref); err != nil || need != 0 {
		t.Errorf("need once staged: %d %v, want 0", need, err)
	}
	// A pull killed after all but the kubelet: its marker not written yet.
	kubelet := filepath.Join(st.Dir, kubeletPath(testComponents))
	fi, err := os.Stat(kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(st.Dir, StagedMarker)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(kubelet); err != nil {
		t.Fatal(err)
	}
	// The bundle manifest is counted: the pull writes it with the files.
	if need, err := s.StagingNeed(ctx, ref); err != nil || need <= uint64(fi.Size()) || need >= want {
		t.Errorf("need after a partial pull: %d %v, want the kubelet's %d bytes and the manifest's, less than %d", need, err, fi.Size(), want)
	}
}

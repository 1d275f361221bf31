package artifact

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A bundle in this product's layout carries kube-proxy when its spec says
// components.kubeProxy: artifacts build takes it from --from-dir,
// verify checks it, install puts it next to the kubelet.
func TestBuildWithKubeProxy(t *testing.T) {
	c := testComponents
	c.KubeProxy = true
	src := srcTree(t)
	kp := BundlePaths(c, runtime.GOARCH)[KubeProxy]
	if kp != "kubernetes/v"+c.Kubernetes+"/bin/linux/"+runtime.GOARCH+"/kube-proxy" {
		t.Fatalf("kube-proxy path %q", kp)
	}
	put(t, src, kp, []byte("kube-proxy "+c.Kubernetes))
	spec := testSpec()
	spec.Components = c
	out := filepath.Join(t.TempDir(), "b")
	m, _, err := build(t, BuildOptions{Spec: spec, FromDir: src, OutputDir: out})
	if err != nil {
		t.Fatal(err)
	}
	if f := m.File(kp); f == nil || f.Component != KubeProxy || !m.Components.KubeProxy {
		t.Fatalf("kube-proxy entry %+v, components %+v", f, m.Components)
	}
	if ps := Verify(context.Background(), out, c); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	root := t.TempDir()
	if _, err := Install(context.Background(), out, root, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/local/bin/kube-proxy")); err != nil || string(b) != "kube-proxy "+c.Kubernetes {
		t.Fatalf("installed kube-proxy %q, %v", b, err)
	}
}

// A node that runs kube-proxy refuses a bundle without it, naming the
// key; one without components.kubeProxy whose files list kube-proxy is
// refused too; a missing kube-proxy file is named.
func TestKubeProxyProblems(t *testing.T) {
	want := testComponents
	want.KubeProxy = true
	dir := makeBundle(t, testComponents)
	ps := Verify(context.Background(), dir, want)
	if len(ps) != 1 || !strings.Contains(ps[0].Msg, "carries no kube-proxy") || !strings.Contains(ps[0].Msg, "networking.kubeProxy") {
		t.Fatalf("problems %v", ps)
	}
	// Without the ask, the same bundle verifies.
	if ps := Verify(context.Background(), dir, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}

	spec := testSpec()
	spec.Components = want
	if _, _, err := build(t, BuildOptions{Spec: spec, FromDir: srcTree(t)}); err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Fatalf("build without a kube-proxy in --from-dir: %v", err)
	}

	m := &Manifest{Components: testComponents, Arch: runtime.GOARCH, Layout: LayoutNative,
		Files: []File{{Path: BundlePaths(want, runtime.GOARCH)[KubeProxy], Component: KubeProxy}}}
	found := false
	for _, p := range layoutProblems(m, "manifest.json") {
		found = found || strings.Contains(p.Msg, "components.kubeProxy is not true")
	}
	if !found {
		t.Fatalf("layout problems %v", layoutProblems(m, "manifest.json"))
	}
}

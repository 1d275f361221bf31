package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

// joinedAt records a node on machine m at version, from image ref with
// digest, as start's save-state and a repave leave it.
func joinedAt(t *testing.T, l layout.Layout, m, version, ref, digest string) {
	t.Helper()
	dir := l.OnRoot(l.StateDir())
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{Machine: m, KubernetesVersion: version, Image: ref, ImageDigest: digest}); err != nil {
		t.Fatal(err)
	}
	if err := state.OpenDir(dir).SaveSides(state.Sides{Active: m, Machines: map[string]state.Side{m: {KubernetesVersion: version, Image: ref, ImageDigest: digest}}}); err != nil {
		t.Fatal(err)
	}
}

// A start repaves exactly when the config names another Kubernetes
// version, another worker image, or a reference that now resolves to
// another digest than the active machine runs; otherwise (and on a host
// with no node) it converges in place.
func TestStartRepavesAChangedNode(t *testing.T) {
	root := t.TempDir()
	p, err := ocilayout.Write(filepath.Join(root, "srv/img"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, ocilayout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	const ref = "oci-layout:///srv/img:v1"
	due := func(version, image string) (*Repave, string) {
		c := &config.Config{Bootstrap: config.Bootstrap{OCIImage: image}}
		c.Components.Kubernetes = version
		c.Agent.NodeName = "n1"
		return NewStart(Options{Layout: l, Config: c}).repaveDue(t.Context())
	}
	if r, why := due("1.35.4", ref); r != nil {
		t.Fatalf("no node yet: repave %s", why)
	}
	joinedAt(t, l, "kube2", "1.34.2", ref, d.String())
	if r, why := due("v1.34.2", ref); r != nil {
		t.Fatalf("nothing changed: repave %s", why)
	}
	r, why := due("1.35.4", ref)
	if r == nil || r.From() != "kube2" || r.To() != "kube1" || why != "components.kubernetes is 1.35.4; machine kube2 runs 1.34.2" {
		t.Fatalf("a new version: %v %q", r, why)
	}
	if r.opts.KubernetesVersion != "1.35.4" || r.start.label != "start" || r.opts.DrainTimeout != 5*time.Minute {
		t.Errorf("repave options: %+v label %q", r.opts, r.start.label)
	}
	if r, why = due("1.34.2", "oci-layout:///srv/other:v1"); r == nil || !strings.Contains(why, "the worker image is oci-layout:///srv/other:v1 (bootstrap.ociImage); machine kube2 runs "+ref) {
		t.Fatalf("a new image: %v %q", r, why)
	}
	joinedAt(t, l, "kube2", "1.34.2", ref, "sha256:"+strings.Repeat("0", 64))
	if r, why = due("1.34.2", ref); r == nil || !strings.Contains(why, "the worker image "+ref+" is "+d.String()+" now") {
		t.Fatalf("a new digest: %v %q", r, why)
	}
}

// A repave that ended well is a Normal Repaved Event with both sides and
// the duration, and a sample of repave_duration_seconds{result=succeeded}.
func TestRepaveReportsSuccess(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.35.4")
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	r.report(t.Context(), &state.Repave{FromMachine: "kube1", ToMachine: "kube2", FromVersion: "1.34.2", ToVersion: "1.35.4",
		Duration: 41 * time.Second, Result: state.RepaveSucceeded})
	if ev := nodeEvents(t, h)[events.ReasonRepaved]; ev != "Normal: aks-flex-node repaved this node from machine kube1 (Kubernetes 1.34.2) to machine kube2 (Kubernetes 1.35.4) in 41s" {
		t.Errorf("Repaved Event: %q", ev)
	}
	repaveMetric(t, l, "succeeded", 1)
}

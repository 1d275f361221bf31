package lifecycle

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// TestAppliedStateRecordsResolvedImage: the digest worker-image resolves
// in preflight is the one provision-machine unpacks, and the applied
// state records it next to bootstrap.ociImage as configured.
func TestAppliedStateRecordsResolvedImage(t *testing.T) {
	root := t.TempDir()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ocilayout.Write(filepath.Join(root, "srv/img"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, ocilayout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Config{Bootstrap: config.Bootstrap{OCIImage: "oci-layout:///srv/img:v1"}}
	s := NewStart(Options{Layout: l, Config: c, ConfigFile: "/etc/aks-flex-node/config.json", ConfigData: []byte("{}")})
	env := &preflight.Env{}
	s.WireChecks(env)
	r, err := env.ResolveImage(context.Background(), c.Bootstrap.OCIImage)
	if err != nil || r.Digest != want.String() || r.ByTag {
		t.Fatalf("ResolveImage = %+v, %v; want %s", r, err, want)
	}
	ctx := context.Background()
	staged := task.NewOutput[artifact.Staged]("stage-node-components")
	staged.Set(artifact.Staged{})
	chosen := task.NewOutput[ImageChoice]("provision-machine")
	if _, err := ProvisionMachine(s.host, s.machine, s.provisioner, s.image, staged, chosen, nil).Do(ctx); err != nil {
		t.Fatal(err)
	}
	sums := task.NewOutput[map[string]string]("write-node-config")
	sums.Set(map[string]string{"/etc/x": "sha256:00"})
	if _, err := SaveState(s.host, s.machine, c, s.opts.ConfigFile, s.opts.ConfigData, chosen, sums).Do(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := state.Open(l).Applied()
	if err != nil || a == nil {
		t.Fatalf("%+v %v", a, err)
	}
	if a.Image != c.Bootstrap.OCIImage || a.ImageDigest != want.String() {
		t.Errorf("applied state image %q %q, want %q %s", a.Image, a.ImageDigest, c.Bootstrap.OCIImage, want)
	}
}

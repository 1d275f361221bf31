package machine

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/Azure/aks-flex-node/internal/image"
	aflayout "github.com/Azure/aks-flex-node/internal/layout"
)

// Inspection is what preflight learns about a worker image without
// making a rootfs of it: what it resolved to, its platform, and how it
// fares against the worker image contract.
type Inspection struct {
	Resolved
	// Platform is the image config's os/arch; WantPlatform the one this
	// host runs.
	Platform, WantPlatform string
	Findings               []image.Finding
	// Cached says the contract was checked on the layer cache's indexes
	// (every layer was cached); otherwise the layers were streamed,
	// hashed against their diff IDs and their tar headers read, with
	// nothing written.
	Cached bool
}

// PlatformOK reports whether the image is for this host's platform.
func (i Inspection) PlatformOK() bool { return i.Platform == i.WantPlatform }

// Inspect resolves ref (as Provision takes it) and checks the image's
// platform and contract, writing nothing: the worker-image preflight
// check. Provision later unpacks exactly the image resolved here.
func (p *Provisioner) Inspect(ctx context.Context, l aflayout.Layout, ref string) (Inspection, error) {
	r, err := p.Resolve(ctx, l.Root(), ref)
	if err != nil {
		return Inspection{}, explainAuth(ref, err)
	}
	img, _, err := p.resolve(ctx, l.Root(), ref)
	if err != nil {
		return Inspection{}, explainAuth(ref, err)
	}
	return p.inspect(ctx, l, img, r)
}

// InspectImage is Inspect for an image already at hand (the worker image
// of a bundle still in its registry).
func (p *Provisioner) InspectImage(ctx context.Context, l aflayout.Layout, img v1.Image) (Inspection, error) {
	d, err := img.Digest()
	if err != nil {
		return Inspection{}, err
	}
	return p.inspect(ctx, l, img, Resolved{Digest: d.String()})
}

func (p *Provisioner) inspect(ctx context.Context, l aflayout.Layout, img v1.Image, r Resolved) (Inspection, error) {
	plat := p.platform()
	in := Inspection{Resolved: r, WantPlatform: plat.OS + "/" + plat.Architecture}
	cf, err := img.ConfigFile()
	if err != nil {
		return in, fmt.Errorf("config: %w", err)
	}
	in.Platform = cf.OS + "/" + cf.Architecture
	if !in.PlatformOK() {
		return in, nil
	}
	layers, err := img.Layers()
	if err != nil {
		return in, err
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return in, fmt.Errorf("manifest has %d layers, config lists %d diff IDs", len(layers), len(cf.RootFS.DiffIDs))
	}
	cache := newLayerCache(l, nil)
	t := image.NewTree()
	in.Cached = true
	for i, layer := range layers {
		if err := ctx.Err(); err != nil {
			return in, err
		}
		e, err := cache.get(cf.RootFS.DiffIDs[i])
		if err == nil && e != nil {
			if err := e.addToTree(t); err != nil {
				return in, err
			}
			continue
		}
		in.Cached = false
		if err := image.IndexLayer(t, layer, cf.RootFS.DiffIDs[i]); err != nil {
			ld, _ := layer.Digest()
			return in, fmt.Errorf("layer %d (%s): %w", i, ld, err)
		}
	}
	needs := image.DefaultNeeds
	if p.Needs != nil {
		needs = *p.Needs
	}
	in.Findings = image.CheckContractFor(t, needs)
	return in, nil
}

// explainAuth makes a registry's refusal to an anonymous or wrongly
// credentialed pull say where credentials come from.
func explainAuth(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%w (the registry of %s wants credentials: they are read from the Docker config, $DOCKER_CONFIG/config.json or ~/.docker/config.json, \"auths\" or a \"credHelpers\"/\"credsStore\" helper, of the user running aks-flex-node)", err, ref)
	}
	return err
}

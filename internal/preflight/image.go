package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/transport"
)

const (
	imageKey          = "bootstrap.ociImage"
	imagePlainHTTPKey = "bootstrap.ociImagePlainHTTP"
)

// ResolvedImage is what the worker image resolved to (Env.ResolveImage).
type ResolvedImage struct {
	Digest string // sha256:...
	// ByTag is a registry reference by tag: what it names can change.
	ByTag bool
	// Repository is registry/repository, for the pinned form.
	Repository string
	// PlainHTTP says why plain HTTP may be used: "" (https only),
	// "loopback", or the config key that allowed it.
	PlainHTTP string
	// Platform is the image's os/arch and WantPlatform this host's; ""
	// when not probed.
	Platform, WantPlatform string
	// Contract is how many contract items were checked (0: not probed)
	// and Misses the ones the image fails, as "item: what was found".
	Contract int
	Misses   []string
	// Cached says the contract was checked on the layer cache.
	Cached bool
}

// workerImageCheck resolves the worker image the way provision-machine
// will (bootstrap.ociImage, else the offline bundle's image, else
// upstream's default for this host), under the transport policy, and
// checks it is for this host's platform and meets the worker image
// contract, so an image start could not use (an unreachable registry, a
// registry that speaks only plain HTTP on the network without
// bootstrap.ociImagePlainHTTP, an arm64 image on amd64, an image without
// iptables) is refused before the host changes; an image named by tag
// only is a warning that recommends the digest it resolved to.
func workerImageCheck(e *Env) Check {
	img := e.Config.Bootstrap.OCIImage
	target := imageKey
	if img != "" {
		target += " " + img
	}
	return NewCheck(NameWorkerImage, target, func(ctx context.Context) Result {
		cfg := e.configFile()
		source := imageKey
		if e.ChooseImage != nil {
			var err error
			if img, source, err = e.ChooseImage(ctx); err != nil {
				return Error(fmt.Sprintf("fix bootstrap.offlineArtifacts or set %s in %s", imageKey, cfg), "worker image: %v", err)
			}
		}
		if img == "" {
			return Error(fmt.Sprintf("set %s in %s: a registry reference pinned by digest (registry/repository@sha256:...) or oci-layout:///dir:tag", imageKey, cfg),
				"%s is not set: start has no image to provision the machine from", imageKey)
		}
		what := img
		if source != imageKey {
			what = img + " (from " + source + ")"
		}
		if e.ResolveImage == nil {
			return OK("%s: resolved when the machine is provisioned", what)
		}
		r, err := e.ResolveImage(ctx, img)
		if err != nil {
			return Error(imageRemedy(img, cfg, err), "worker image %s does not resolve: %v", what, err)
		}
		if r.Platform != "" && r.Platform != r.WantPlatform {
			return Error(fmt.Sprintf("use an image built for %s (aks-flex-node image build --arch), or an index with a %s manifest, in %s", r.WantPlatform, r.WantPlatform, imageKey),
				"worker image %s (%s) is for %s; this host runs %s", what, r.Digest, r.Platform, r.WantPlatform)
		}
		if len(r.Misses) > 0 {
			return Error(fmt.Sprintf("add what is missing to the image, or build one with `aks-flex-node image build --spec examples/worker-image/bookworm.json`, and name it in %s in %s; `aks-flex-node image check REF` checks an image", imageKey, cfg),
				"worker image %s (%s) does not meet the worker image contract: %s", what, r.Digest, strings.Join(r.Misses, "; "))
		}
		how := ""
		switch r.PlainHTTP {
		case "":
		case "loopback":
			how = " (plain HTTP: the registry is on loopback)"
		default:
			how = " (plain HTTP, allowed by " + r.PlainHTTP + ")"
		}
		if r.Contract > 0 {
			how += fmt.Sprintf("; %s, meets the worker image contract (%d items", r.Platform, r.Contract)
			if r.Cached {
				how += ", checked on the cached layers"
			}
			how += ")"
		}
		if r.ByTag {
			return Warning(fmt.Sprintf("pin it: set %s to %s@%s in %s", imageKey, r.Repository, r.Digest, cfg),
				"worker image %s is referenced by tag only: it resolves to %s now%s, and the tag can move", what, r.Digest, how)
		}
		return OK("worker image %s resolves to %s%s", what, r.Digest, how)
	})
}

// imageRemedy says what to do about an image that did not resolve: for a
// plain-HTTP refusal, serve over https or opt in (when the refused host is
// the image's own registry: the opt-in covers nothing else).
func imageRemedy(img, cfg string, err error) string {
	var re *transport.RefusedError
	switch {
	case !errors.As(err, &re):
		return fmt.Sprintf("make %s reachable from this host, or fix %s in %s", img, imageKey, cfg)
	case strings.HasPrefix(img, re.Host+"/"):
		return fmt.Sprintf("serve the registry %s over https, or, if plain HTTP to it is intended, set %s to true in %s", re.Host, imagePlainHTTPKey, cfg)
	default:
		return fmt.Sprintf("the registry of %s sends the download to plain HTTP on %s, which is refused: make that host serve https", img, re.Host)
	}
}

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

// ResolvedImage is what bootstrap.ociImage resolved to (Env.ResolveImage).
type ResolvedImage struct {
	Digest string // sha256:...
	// ByTag is a registry reference by tag: what it names can change.
	ByTag bool
	// Repository is registry/repository, for the pinned form.
	Repository string
	// PlainHTTP says why plain HTTP may be used: "" (https only),
	// "loopback", or the config key that allowed it.
	PlainHTTP string
}

// workerImageCheck resolves the worker image the way provision-machine
// will, under the transport policy, so an image start could not pull (an
// unreachable registry, a registry that speaks only plain HTTP on the
// network without bootstrap.ociImagePlainHTTP) is refused before the host
// changes; an image named by tag only is a warning that recommends the
// digest it resolved to.
func workerImageCheck(e *Env) Check {
	img := e.Config.Bootstrap.OCIImage
	target := imageKey
	if img != "" {
		target += " " + img
	}
	return NewCheck(NameWorkerImage, target, func(ctx context.Context) Result {
		cfg := e.configFile()
		if img == "" {
			return Error(fmt.Sprintf("set %s in %s: a registry reference pinned by digest (registry/repository@sha256:...) or oci-layout:///dir:tag", imageKey, cfg),
				"%s is not set: start has no image to provision the machine from", imageKey)
		}
		if e.ResolveImage == nil {
			return OK("%s: resolved when the machine is provisioned", img)
		}
		r, err := e.ResolveImage(ctx, img)
		if err != nil {
			return Error(imageRemedy(img, cfg, err), "worker image %s does not resolve: %v", img, err)
		}
		how := ""
		switch r.PlainHTTP {
		case "":
		case "loopback":
			how = " (plain HTTP: the registry is on loopback)"
		default:
			how = " (plain HTTP, allowed by " + r.PlainHTTP + ")"
		}
		if r.ByTag {
			return Warning(fmt.Sprintf("pin it: set %s to %s@%s in %s", imageKey, r.Repository, r.Digest, cfg),
				"worker image %s is referenced by tag only: it resolves to %s now%s, and the tag can move", img, r.Digest, how)
		}
		return OK("worker image %s resolves to %s%s", img, r.Digest, how)
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

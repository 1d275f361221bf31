package machine

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/transport"
)

// PlainHTTPKey is the config key that allows plain HTTP to the registry
// of a registry bootstrap.ociImage; refusals name it.
const PlainHTTPKey = "bootstrap.ociImagePlainHTTP"

// MaxImageBytes caps the compressed layers of a registry image, summed
// from its manifest before any layer is fetched: each layer is then held
// to its manifest size while it streams. A worker image is a few hundred
// MiB; the cap leaves room for images with GPU drivers.
const MaxImageBytes int64 = 16 << 30

// Provisioner unpacks OCI images into machine rootfs directories. The zero
// value pulls anonymously for linux/GOARCH under the default transport
// policy: https, plain HTTP only to a loopback registry. A Provisioner
// resolves each reference once: the image preflight resolved is the one
// Provision unpacks, even when the tag moves in between.
type Provisioner struct {
	// Keychain authenticates registry pulls; nil pulls anonymously.
	Keychain authn.Keychain
	// PlainHTTP allows plain HTTP to the registry of a registry reference
	// that is not on loopback (bootstrap.ociImagePlainHTTP). It covers
	// that registry only, not a host it redirects to.
	PlainHTTP bool
	// Limits bound each registry request; zero fields take
	// transport.DefaultLimits'.
	Limits transport.Limits
	// Platform selects from a multi-platform index; zero means
	// linux/runtime.GOARCH.
	Platform v1.Platform
	// Needs are the netfilter tools the node will call in the machine,
	// which the image contract then requires (image.Needs); nil is the
	// default config's (image.DefaultNeeds).
	Needs *image.Needs
	// linkMode is the first way of making a rootfs from the layer cache
	// that is tried (materialize.go); zero is reflink. Benchmarks and
	// tests set it.
	linkMode linkMode

	mu       sync.Mutex
	resolved map[string]resolvedImage // by reference (and root, for a layout)
}

// resolvedImage is a reference resolved once. img is kept for a layout
// only: a registry image holds the context it was fetched with (for its
// layer downloads), so it is fetched again by digest with the caller's.
type resolvedImage struct {
	img    v1.Image
	digest v1.Hash
}

// Resolved is what a reference resolved to and how it is reached.
type Resolved struct {
	Digest string // sha256:...
	// ByTag is a registry reference by tag: what it names can change
	// under the same config.
	ByTag bool
	// Registry is the registry host and Repository registry/repository
	// ("" for an OCI layout).
	Registry, Repository string
	// PlainHTTP says why plain HTTP may be used: "" (https only),
	// "loopback", or PlainHTTPKey.
	PlainHTTP string
}

// Resolve resolves imageRef (as Provision takes it; a layout dir is
// opened under root) to a manifest digest without unpacking anything:
// what preflight reports. Provision later unpacks exactly that image.
func (p *Provisioner) Resolve(ctx context.Context, root, imageRef string) (Resolved, error) {
	_, d, err := p.resolve(ctx, root, imageRef)
	if err != nil {
		return Resolved{}, err
	}
	r := Resolved{Digest: d.String()}
	if strings.HasPrefix(imageRef, OCILayoutScheme) {
		return r, nil
	}
	ref, err := name.ParseReference(imageRef)
	if err != nil {
		return Resolved{}, err
	}
	_, byDigest := ref.(name.Digest)
	r.ByTag = !byDigest
	r.Registry = ref.Context().RegistryStr()
	r.Repository = ref.Context().Name()
	switch pol := p.policy(r.Registry); {
	case transport.IsLoopback(r.Registry):
		r.PlainHTTP = "loopback"
	case pol.PlainHTTPAllowed(r.Registry):
		r.PlainHTTP = PlainHTTPKey
	}
	return r, nil
}

func (p *Provisioner) platform() v1.Platform {
	if p.Platform.OS != "" {
		return p.Platform
	}
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// resolve returns the image and the manifest digest it must hash to,
// resolving each reference once per Provisioner.
func (p *Provisioner) resolve(ctx context.Context, root, ref string) (v1.Image, v1.Hash, error) {
	key := ref // a layout is a path under root; a registry reference is not
	if strings.HasPrefix(ref, OCILayoutScheme) {
		key = root + "\x00" + ref
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.resolved[key]
	switch {
	case ok && r.img != nil:
		return r.img, r.digest, nil
	case ok:
		return p.fromRegistryPinned(ctx, ref, r.digest)
	}
	var img v1.Image
	var d v1.Hash
	var err error
	if strings.HasPrefix(ref, OCILayoutScheme) {
		img, d, err = p.fromLayout(root, ref)
		r = resolvedImage{img, d}
	} else {
		img, d, err = p.fromRegistry(ctx, ref)
		r = resolvedImage{digest: d}
	}
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if p.resolved == nil {
		p.resolved = map[string]resolvedImage{}
	}
	p.resolved[key] = r
	return img, d, nil
}

// fromRegistryPinned fetches the image ref resolved to earlier, by that
// digest, so a tag that moved since is not followed.
func (p *Provisioner) fromRegistryPinned(ctx context.Context, ref string, d v1.Hash) (v1.Image, v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	img, got, err := p.fromRegistry(ctx, r.Context().Digest(d.String()).Name())
	if err == nil && got != d {
		err = fmt.Errorf("%s@%s: manifest hashes to %s", r.Context().Name(), d, got)
	}
	return img, got, err
}

// policy is the transport policy for registry host reg.
func (p *Provisioner) policy(reg string) transport.Policy {
	pol := transport.Policy{OptIn: PlainHTTPKey, Limits: p.Limits}
	if p.PlainHTTP {
		pol.PlainHTTPHost = reg
	}
	return pol
}

// fromRegistry fetches the manifest of s through the transport policy.
// go-containerregistry on its own would speak plain HTTP to any RFC 1918
// or .local registry; every request here, redirects and foreign layer
// URLs included, goes through the policy instead.
func (p *Provisioner) fromRegistry(ctx context.Context, s string) (v1.Image, v1.Hash, error) {
	ref, err := name.ParseReference(s)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	reg := ref.Context().RegistryStr()
	pol := p.policy(reg)
	if pol.PlainHTTPAllowed(reg) {
		if ref, err = name.ParseReference(s, name.Insecure); err != nil {
			return nil, v1.Hash{}, err
		}
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(p.platform()), remote.WithTransport(pol.RoundTripper())}
	if p.Keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(p.Keychain))
	}
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	total := m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	if total > MaxImageBytes {
		return nil, v1.Hash{}, fmt.Errorf("%s: the manifest lists %d bytes of layers, more than the %d a worker image may have", s, total, MaxImageBytes)
	}
	// remote checks a by-digest pull itself; by tag, the digest is what
	// the bytes hash to.
	return img, sha256Hash(raw), nil
}

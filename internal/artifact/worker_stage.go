package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BundleImage is the worker image the configured bundle carries, as start
// uses it when bootstrap.ociImage is empty.
type BundleImage struct {
	// Ref is the image's oci-layout:// reference on the host, pinned by
	// digest: the bundle dir itself, or where stage puts a registry
	// bundle.
	Ref    string
	Digest string
	// Staged says Ref exists on the host now; a registry bundle not
	// pulled yet is read from its registry by Remote instead.
	Staged bool
	Remote func(ctx context.Context) (v1.Image, error)
}

// BundleImage returns the worker image the configured bundle carries, or
// nil when it carries none (or there is no bundle: upstream downloads).
// It reads the bundle's manifest only (from the registry for an oci://
// source), nothing large.
func (s *Stager) BundleImage(ctx context.Context) (*BundleImage, error) {
	if s.Source == "" {
		return nil, nil
	}
	src, err := ResolveSource(s.Source, s.Want.Kubernetes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap.offlineArtifacts.source: %w", err)
	}
	if !strings.HasPrefix(src, OCIScheme) {
		m, err := LoadManifest(s.Layout.OnRoot(src))
		if err != nil || m.WorkerImage == nil {
			return nil, err
		}
		return &BundleImage{Ref: m.WorkerImageRef(src), Digest: m.WorkerImage.Digest, Staged: true}, nil
	}
	reg := Registry{PlainHTTP: s.PlainHTTP}
	rem, ps := reg.Inspect(ctx, src, s.Want, s.arch())
	if len(ps) > 0 {
		return nil, Problems(ps)
	}
	wi := rem.Manifest.WorkerImage
	if wi == nil {
		return nil, nil
	}
	staged := s.ociStaged(rem)
	b := &BundleImage{Ref: rem.Manifest.WorkerImageRef(staged), Digest: wi.Digest}
	b.Staged = s.pulled(rem)
	b.Remote = func(ctx context.Context) (v1.Image, error) { return reg.WorkerImage(ctx, rem) }
	return b, nil
}

// WorkerImage reads the worker image a registry bundle carries straight
// from the bundle's repository: every file of the image's layout is a
// layer of the bundle artifact whose digest is the file's SHA-256, and
// the layout's blobs are named by that same digest, so the image's
// manifest, config and layers are blobs of the repository under their
// own digests.
func (r Registry) WorkerImage(ctx context.Context, rem *Remote) (v1.Image, error) {
	wi := rem.Manifest.WorkerImage
	if wi == nil {
		return nil, fmt.Errorf("%s carries no worker image", rem.Ref)
	}
	d, err := v1.NewHash(wi.Digest)
	if err != nil {
		return nil, err
	}
	ri := &remoteImage{repo: rem.Ref.Context(), opts: r.options(ctx, rem.Ref), digest: d}
	if ri.manifest, err = ri.blob(d, maxJSONBlob); err != nil {
		return nil, fmt.Errorf("worker image manifest %s: %w", d, err)
	}
	if err := json.Unmarshal(ri.manifest, &ri.parsed); err != nil {
		return nil, fmt.Errorf("worker image manifest %s: %w", d, err)
	}
	return partial.CompressedToImage(ri)
}

// remoteImage is an image whose manifest is a blob (not a manifest) of a
// repository.
type remoteImage struct {
	repo     name.Repository
	opts     []remote.Option
	digest   v1.Hash
	manifest []byte
	parsed   v1.Manifest
}

func (ri *remoteImage) blob(d v1.Hash, max int64) ([]byte, error) {
	l, err := remote.Layer(ri.repo.Digest(d.String()), ri.opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("blob %s is larger than %d bytes", d, max)
	}
	if got := sha256Hash(hashHex(b)); got != d {
		return nil, fmt.Errorf("blob %s hashes to %s", d, got)
	}
	return b, nil
}

func (ri *remoteImage) RawManifest() ([]byte, error) { return ri.manifest, nil }

func (ri *remoteImage) MediaType() (types.MediaType, error) {
	if ri.parsed.MediaType != "" {
		return ri.parsed.MediaType, nil
	}
	return types.OCIManifestSchema1, nil
}

func (ri *remoteImage) RawConfigFile() ([]byte, error) {
	return ri.blob(ri.parsed.Config.Digest, maxJSONBlob)
}

func (ri *remoteImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range ri.parsed.Layers {
		if l.Digest == h {
			rl, err := remote.Layer(ri.repo.Digest(h.String()), ri.opts...)
			if err != nil {
				return nil, err
			}
			return typedLayer{Layer: rl, mt: l.MediaType}, nil
		}
	}
	if h == ri.parsed.Config.Digest {
		b, err := ri.RawConfigFile()
		if err != nil {
			return nil, err
		}
		return configLayer(b), nil
	}
	return nil, fmt.Errorf("worker image %s has no blob %s", ri.digest, h)
}

// typedLayer is a repository blob with the media type the image manifest
// gives it (the bundle artifact lists it as a plain file).
type typedLayer struct {
	v1.Layer
	mt types.MediaType
}

func (l typedLayer) MediaType() (types.MediaType, error) { return l.mt, nil }

// configLayer is the config blob, for partial's config-as-layer lookups.
type configLayer []byte

func (c configLayer) Digest() (v1.Hash, error) { return sha256Hash(hashHex(c)), nil }
func (c configLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(c)), nil
}
func (c configLayer) Size() (int64, error)                { return int64(len(c)), nil }
func (c configLayer) MediaType() (types.MediaType, error) { return types.OCIConfigJSON, nil }

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

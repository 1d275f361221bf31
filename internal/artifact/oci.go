package artifact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/Azure/aks-flex-node/internal/transport"
)

// A bundle in a registry is one OCI artifact (docs/offline-bundle.md):
//
//   - the config blob is manifest.json itself, so a consumer reads and
//     checks the index before it downloads anything large;
//   - every other file of the bundle (payloads, legal files, and their
//     .sha256 sidecars) is one uncompressed layer whose
//     org.opencontainers.image.title is its path in the bundle.
//
// One uncompressed layer per file makes each payload's layer digest its
// SHA-256 in manifest.json: the registry and the puller verify content
// for free, a consumer can compare the two before downloading, and a pull
// streams file by file and resumes per file.
const (
	ArtifactType     = "application/vnd.aks-flex-node.bundle.v1"
	BundleConfigType = "application/vnd.aks-flex-node.bundle.manifest.v1+json"
	FileLayerType    = "application/vnd.aks-flex-node.bundle.file.v1"
	titleAnnotation  = "org.opencontainers.image.title"
	// OCIScheme prefixes registry sources.
	OCIScheme = "oci://"
)

// Registry talks to the registry holding bundles, under the transport
// policy (internal/transport).
type Registry struct {
	// PlainHTTP allows http:// to the registry of the reference at hand
	// when it is not on loopback (bootstrap.offlineArtifacts.plainHTTP,
	// --plain-http); that registry only, not a host it redirects to.
	// Loopback registries (127.0.0.0/8, ::1, localhost) may always use it.
	PlainHTTP bool
	// Limits bound each request; zero fields take transport.DefaultLimits'.
	Limits transport.Limits
	// Keychain finds credentials; nil means the docker config keychain.
	Keychain authn.Keychain
}

// PlainHTTPKey is what allows plain HTTP to a bundle registry; refusals
// name it.
const PlainHTTPKey = "bootstrap.offlineArtifacts.plainHTTP (artifacts commands: --plain-http)"

// ParseReference parses "oci://registry/repository:tag" (or @sha256:...).
func (r Registry) ParseReference(source string) (name.Reference, error) {
	s, ok := strings.CutPrefix(source, OCIScheme)
	if !ok {
		return nil, fmt.Errorf("%q is not an oci://registry/repository:tag reference", source)
	}
	probe, err := name.ParseReference(s, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%q: %w (want oci://registry/repository:tag)", source, err)
	}
	var opts []name.Option
	if r.policy(probe).PlainHTTPAllowed(probe.Context().RegistryStr()) {
		opts = append(opts, name.Insecure)
	}
	return name.ParseReference(s, append(opts, name.StrictValidation)...)
}

// policy is the transport policy for ref's registry: go-containerregistry
// on its own would also use plain HTTP for RFC 1918 and .local
// registries, a downgrade nobody asked for.
func (r Registry) policy(ref name.Reference) transport.Policy {
	p := transport.Policy{OptIn: PlainHTTPKey, Limits: r.Limits}
	if r.PlainHTTP {
		p.PlainHTTPHost = ref.Context().RegistryStr()
	}
	return p
}

func (r Registry) options(ctx context.Context, ref name.Reference) []remote.Option {
	kc := r.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(r.policy(ref).RoundTripper()), remote.WithAuthFromKeychain(kc)}
}

// fileLayer is one bundle file as an uncompressed layer; the digest is
// known before the upload (it is the file's SHA-256).
type fileLayer struct {
	path      string
	digest    v1.Hash
	size      int64
	mediaType types.MediaType
}

func (l fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }
func (l fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l fileLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }
func sha256Hash(hexSum string) v1.Hash                   { return v1.Hash{Algorithm: "sha256", Hex: hexSum} }
func (l fileLayer) descriptor(title string) v1.Descriptor {
	return v1.Descriptor{MediaType: l.mediaType, Size: l.size, Digest: l.digest, Annotations: map[string]string{titleAnnotation: title}}
}

// rawManifest is a manifest remote.Put can write as it is.
type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.b, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// bundleFiles lists every file of a bundle but manifest.json, sorted:
// what the artifact's layers are.
func bundleFiles(m *Manifest) []string {
	var rels []string
	for _, f := range m.Files {
		rels = append(rels, f.Path, f.Path+".sha256")
	}
	for _, l := range m.Legal {
		rels = append(rels, l.Path, l.Path+".sha256")
	}
	sort.Strings(rels)
	return rels
}

// Push verifies the bundle in dir and publishes it as ref. It returns the
// artifact's manifest digest. The artifact manifest has no timestamps, so
// pushing the same bundle twice gives the same digest.
func (r Registry) Push(ctx context.Context, dir, source string) (string, error) {
	ref, err := r.ParseReference(source)
	if err != nil {
		return "", err
	}
	m, ps := VerifyIntegrity(ctx, dir)
	if len(ps) > 0 {
		return "", fmt.Errorf("bundle %s does not verify, not pushing: %w", dir, Problems(ps))
	}
	if m.Layout == LayoutUpstream {
		// Its manifest names no checksums, so the artifact's layers could
		// not be checked against it when it is pulled.
		return "", fmt.Errorf("bundle %s is in upstream's layout, which is read from a directory only: convert it with artifacts build --layout native --from-dir %s, and push that", dir, dir)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return "", err
	}
	cfgSum, _, err := copyHashed(ctx, io.Discard, bytes.NewReader(cfg))
	if err != nil {
		return "", err
	}
	known := map[string]string{}
	for _, f := range m.Files {
		known[f.Path] = f.SHA256
	}
	for _, l := range m.Legal {
		known[l.Path] = l.SHA256
	}
	opts := r.options(ctx, ref)
	repo := ref.Context()
	var layers []v1.Descriptor
	for _, rel := range bundleFiles(m) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		sum, ok := known[rel]
		if !ok { // a sidecar: small, hashed here
			if sum, _, err = hashFile(ctx, p); err != nil {
				return "", err
			}
		}
		l := fileLayer{path: p, digest: sha256Hash(sum), size: fi.Size(), mediaType: FileLayerType}
		if err := remote.WriteLayer(repo, l, opts...); err != nil {
			return "", fmt.Errorf("push %s: %w", rel, err)
		}
		layers = append(layers, l.descriptor(rel))
	}
	cl := fileLayer{path: filepath.Join(dir, ManifestName), digest: sha256Hash(cfgSum), size: int64(len(cfg)), mediaType: BundleConfigType}
	if err := remote.WriteLayer(repo, cl, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", ManifestName, err)
	}
	om := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        v1.Descriptor{MediaType: BundleConfigType, Size: cl.size, Digest: cl.digest},
		Layers:        layers,
	}
	raw, err := json.Marshal(om)
	if err != nil {
		return "", err
	}
	if err := remote.Put(ref, rawManifest{raw, types.OCIManifestSchema1}, opts...); err != nil {
		return "", fmt.Errorf("push manifest to %s: %w", ref, err)
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// Remote is a bundle as a registry holds it: the artifact's digest, the
// bundle manifest (its config blob) and the layers by title.
type Remote struct {
	Ref      name.Reference
	Digest   v1.Hash
	Manifest *Manifest
	layers   map[string]v1.Descriptor
	config   []byte
}

// Inspect fetches the artifact manifest and the bundle manifest of source
// (an oci:// reference) without downloading any file, and checks that
// they agree: every bundle file is a layer whose digest is the file's
// SHA-256 in manifest.json, and nothing else is. Problems name the file.
// It also compares the versions with want and the arch with arch ("" skips).
func (r Registry) Inspect(ctx context.Context, source string, want Components, arch string) (*Remote, []Problem) {
	fail := func(err error) (*Remote, []Problem) { return nil, []Problem{{source, err.Error()}} }
	ref, err := r.ParseReference(source)
	if err != nil {
		return fail(err)
	}
	opts := r.options(ctx, ref)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return fail(fmt.Errorf("fetch artifact manifest: %w", err))
	}
	var om v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &om); err != nil {
		return fail(fmt.Errorf("artifact manifest %s: %w", desc.Digest, err))
	}
	if om.Config.MediaType != BundleConfigType {
		return fail(fmt.Errorf("%s is not an aks-flex-node bundle: config media type %q, want %q (push bundles with `aks-flex-node artifacts push`)", desc.Digest, om.Config.MediaType, BundleConfigType))
	}
	if om.Config.Size > maxManifest {
		return fail(fmt.Errorf("bundle manifest is %d bytes, more than %d", om.Config.Size, maxManifest))
	}
	cl, err := remote.Layer(ref.Context().Digest(om.Config.Digest.String()), opts...)
	if err != nil {
		return fail(err)
	}
	rc, err := cl.Compressed()
	if err != nil {
		return fail(fmt.Errorf("fetch %s: %w", ManifestName, err))
	}
	cfg, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	rc.Close()
	if err != nil {
		return fail(fmt.Errorf("fetch %s: %w", ManifestName, err))
	}
	where := source + " " + ManifestName
	m, err := ParseManifest(where, cfg)
	if err != nil {
		return fail(err)
	}
	rem := &Remote{Ref: ref, Digest: desc.Digest, Manifest: m, layers: map[string]v1.Descriptor{}, config: cfg}
	var ps []Problem
	for i, l := range om.Layers {
		title := l.Annotations[titleAnnotation]
		if err := validRel(title); err != nil || title == ManifestName {
			ps = append(ps, Problem{source, fmt.Sprintf("layer %d (%s) has no usable %s: %q", i, l.Digest, titleAnnotation, title)})
			continue
		}
		if _, dup := rem.layers[title]; dup {
			ps = append(ps, Problem{title, "is more than one layer in " + source})
		}
		if l.Digest.Algorithm != "sha256" {
			ps = append(ps, Problem{title, fmt.Sprintf("layer digest %s is not sha256", l.Digest)})
		}
		rem.layers[title] = l
	}
	ps = append(ps, versionProblems(m, where, want, arch)...)
	ps = append(ps, layoutProblems(m, where)...)
	expect := map[string]bool{}
	check := func(rel, sum string, size int64) {
		l, ok := rem.layers[rel]
		switch {
		case !ok:
			ps = append(ps, Problem{rel, "listed in " + ManifestName + " but not a layer of " + source})
		case l.Digest.Hex != sum:
			ps = append(ps, Problem{rel, fmt.Sprintf("layer %s in %s != manifest sha256 %s", l.Digest, source, sum)})
		case l.Size != size:
			ps = append(ps, Problem{rel, fmt.Sprintf("layer size %d in %s != manifest size %d", l.Size, source, size)})
		}
	}
	for _, f := range m.Files {
		check(f.Path, f.SHA256, f.Size)
	}
	for _, l := range m.Legal {
		check(l.Path, l.SHA256, l.Size)
	}
	for _, rel := range bundleFiles(m) {
		expect[rel] = true
		if _, ok := rem.layers[rel]; !ok && strings.HasSuffix(rel, ".sha256") {
			ps = append(ps, Problem{rel, "not a layer of " + source})
		}
	}
	for title := range rem.layers {
		if !expect[title] {
			ps = append(ps, Problem{title, "layer of " + source + " is not a file of the bundle's " + ManifestName})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
	return rem, ps
}

// Pull downloads rem into dir, which it creates: each layer streams to a
// temp file, is checked against its digest and renamed into place; a file
// already present with the right content is not downloaded again, so an
// interrupted pull resumes per file. manifest.json is written last. It
// does not verify the result as a bundle: run Verify on dir.
func (r Registry) Pull(ctx context.Context, rem *Remote, dir string) (downloaded int64, err error) {
	opts := r.options(ctx, rem.Ref)
	titles := make([]string, 0, len(rem.layers))
	for t := range rem.layers {
		titles = append(titles, t)
	}
	sort.Strings(titles)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	for _, rel := range titles {
		l := rem.layers[rel]
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if same, err := sameFile(ctx, dst, 0o644, l.Digest.Hex); err != nil {
			return downloaded, err
		} else if same {
			continue
		}
		if err := mkdirs(dir, path.Dir(rel)); err != nil {
			return downloaded, err
		}
		n, err := r.pullLayer(ctx, rem.Ref.Context(), l, dst, opts)
		downloaded += n
		if err != nil {
			return downloaded, fmt.Errorf("pull %s from %s: %w", rel, rem.Ref, err)
		}
	}
	mp := filepath.Join(dir, ManifestName)
	if _, _, err := writeStream(ctx, mp, bytes.NewReader(rem.config), 0o644, "", true); err != nil {
		return downloaded, err
	}
	return downloaded, nil
}

func (r Registry) pullLayer(ctx context.Context, repo name.Repository, l v1.Descriptor, dst string, opts []remote.Option) (int64, error) {
	layer, err := remote.Layer(repo.Digest(l.Digest.String()), opts...)
	if err != nil {
		return 0, err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	cr := &countReader{r: io.LimitReader(rc, l.Size+1)}
	_, _, err = writeStream(ctx, dst, cr, 0o644, l.Digest.Hex, false)
	if err == nil && cr.n != l.Size {
		os.Remove(dst)
		err = fmt.Errorf("size %d != layer size %d", cr.n, l.Size)
	}
	return cr.n, err
}

// VerifyRemote checks rem the way Verify checks a directory, streaming
// every layer from the registry through SHA-256 (and image archives
// through a tar reader) without writing anything: each file must hash to
// manifest.json's checksum and agree with its .sha256 layer. Run Inspect
// first; every problem names the file.
func (r Registry) VerifyRemote(ctx context.Context, rem *Remote) []Problem {
	opts := r.options(ctx, rem.Ref)
	var ps []Problem
	check := func(rel, want string, image bool) {
		sideL, err := remote.Layer(rem.Ref.Context().Digest(rem.layers[rel+".sha256"].Digest.String()), opts...)
		if err != nil {
			ps = append(ps, Problem{rel + ".sha256", err.Error()})
			return
		}
		rc, err := sideL.Compressed()
		if err != nil {
			ps = append(ps, Problem{rel + ".sha256", err.Error()})
			return
		}
		side, err := io.ReadAll(io.LimitReader(rc, 4096))
		rc.Close()
		fields := strings.Fields(string(side))
		if err != nil || len(fields) == 0 || strings.ToLower(fields[0]) != want {
			ps = append(ps, Problem{rel + ".sha256", fmt.Sprintf("does not start with the manifest's sha256 %s (read %q, %v)", want, side, err)})
			return
		}
		l, err := remote.Layer(rem.Ref.Context().Digest(rem.layers[rel].Digest.String()), opts...)
		if err != nil {
			ps = append(ps, Problem{rel, err.Error()})
			return
		}
		rc, err = l.Compressed()
		if err != nil {
			ps = append(ps, Problem{rel, err.Error()})
			return
		}
		defer rc.Close()
		// Held to its manifest size: a registry that streams on past it
		// gets a mismatch, not the rest of the transfer's time bound.
		sum, imageErr, err := hashStream(ctx, io.LimitReader(rc, rem.layers[rel].Size+1), image)
		switch {
		case err != nil:
			ps = append(ps, Problem{rel, fmt.Sprintf("read from %s: %v", rem.Ref, err)})
		case sum != want:
			ps = append(ps, Problem{rel, fmt.Sprintf("sha256 %s from %s != manifest %s", sum, rem.Ref, want)})
		case imageErr != nil:
			ps = append(ps, Problem{rel, "not a readable image archive: " + imageErr.Error()})
		}
	}
	for _, f := range rem.Manifest.Files {
		check(f.Path, f.SHA256, f.Component == ImageFile)
	}
	for _, l := range rem.Manifest.Legal {
		check(l.Path, l.SHA256, false)
	}
	return ps
}

// PullImageArchive writes the linux/arch image ref (a registry reference,
// no scheme) as a docker-save archive at dst, for `artifacts build` in
// online mode. The archive is a function of the image's content only.
func (r Registry) PullImageArchive(ctx context.Context, ref, arch, dst string) error {
	ir, err := r.ParseReference(OCIScheme + ref)
	if err != nil {
		return err
	}
	img, err := remote.Image(ir, append(r.options(ctx, ir), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))...)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := tarball.Write(ir, img, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

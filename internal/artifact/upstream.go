package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Upstream's layout: the bundles upstream AKS Flex Node reads, built by
// the agent-artifacts-builder of Azure/unbounded (notes in
// docs/offline-bundle.md). Its manifest.json names versions and image
// references only; the file list follows from them, and each file's
// .sha256 sidecar is the only checksum it has. A bundle in that layout is
// read into the same Manifest as this product's, so that verify, the
// verification record, install and preflight treat both alike: every
// file is hashed while it streams and compared with its sidecar (and, in
// this product's layout, with manifest.json too).

// Bundle layouts: this product's and upstream's.
const (
	LayoutNative   = "native"
	LayoutUpstream = "upstream"
)

// KubeProxy tags kube-proxy, which upstream's layout always carries and
// this product's carries when components.kubeProxy says so. It is
// verified like every file and installed next to the kubelet; it runs
// only on a node with networking.kubeProxy "agent".
const KubeProxy = "kube-proxy"

// upstreamManifest is upstream's manifest.json.
type upstreamManifest struct {
	SchemaVersion   int              `json:"schemaVersion,omitempty"`
	Versions        upstreamVersions `json:"versions"`
	ContainerImages []string         `json:"containerImages"`
}

type upstreamVersions struct {
	Kubernetes string `json:"kubernetes"`
	Containerd string `json:"containerd"`
	Runc       string `json:"runc"`
	CNI        string `json:"cni"`
	Crictl     string `json:"crictl"`
}

// ValidLayout checks a --layout value.
func ValidLayout(l string) error {
	if l != LayoutNative && l != LayoutUpstream {
		return fmt.Errorf("layout %q is not %s or %s", l, LayoutNative, LayoutUpstream)
	}
	return nil
}

// DetectLayout says which layout a manifest.json is in: upstream's has a
// "versions" object and none of this product's keys; this product's has
// "schemaVersion" and "components". name says where data came from.
func DetectLayout(name string, data []byte) (string, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	_, versions := keys["versions"]
	_, components := keys["components"]
	_, files := keys["files"]
	switch {
	case versions && !components && !files:
		return LayoutUpstream, nil
	case components || files:
		return LayoutNative, nil
	}
	return "", fmt.Errorf("%s: neither layout: no \"components\" and \"files\" (this product's) and no \"versions\" (upstream's)", name)
}

// UpstreamPaths maps each component to its path in upstream's layout for
// versions c (crictl required) and arch.
func UpstreamPaths(c Components, arch string) map[string]string {
	k, cd, r, n, t := trimV(c.Kubernetes), trimV(c.Containerd), trimV(c.Runc), trimV(c.CNI), trimV(c.Crictl)
	return map[string]string{
		Kubelet:    fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kubelet", k, arch),
		Kubectl:    fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kubectl", k, arch),
		KubeProxy:  fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kube-proxy", k, arch),
		Containerd: fmt.Sprintf("containerd/v%s/containerd-%s-linux-%s.tar.gz", cd, cd, arch),
		Runc:       fmt.Sprintf("runc/v%s/runc.%s", r, arch),
		CNI:        fmt.Sprintf("cni/v%s/cni-plugins-linux-%s-v%s.tgz", n, arch, n),
		Crictl:     fmt.Sprintf("crictl/v%s/crictl-v%s-linux-%s.tar.gz", t, t, arch),
	}
}

// UpstreamImagePath is where upstream's layout keeps the archive of image
// ref for arch: the reference with "/", ":" and "@" made "_", and the
// first 6 bytes of the reference's SHA-256, in hex.
func UpstreamImagePath(arch, ref string) string {
	ref = strings.TrimSpace(ref)
	name := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref)
	sum := sha256.Sum256([]byte(ref))
	return fmt.Sprintf("container-images/%s/%s-%x.tar", arch, name, sum[:6])
}

// parseUpstream decodes upstream's manifest.json strictly and normalizes
// it as upstream does: versions without a leading "v", image references
// trimmed, deduplicated and sorted. Versions are checked as this
// product's are, since they become paths.
func parseUpstream(name string, data []byte) (*upstreamManifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var u upstreamManifest
	if err := dec.Decode(&u); err != nil {
		return nil, fmt.Errorf("%s (upstream's layout): %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the manifest object", name)
	}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s (upstream's layout): %s: %s", name, field, fmt.Sprintf(format, a...)))
	}
	if u.SchemaVersion != 0 && u.SchemaVersion != 1 {
		bad("schemaVersion", "%d is not supported (want 1 or none)", u.SchemaVersion)
	}
	v := &u.Versions
	for _, f := range []struct {
		field string
		v     *string
	}{
		{"versions.kubernetes", &v.Kubernetes}, {"versions.containerd", &v.Containerd},
		{"versions.runc", &v.Runc}, {"versions.cni", &v.CNI}, {"versions.crictl", &v.Crictl},
	} {
		*f.v = trimV(strings.TrimSpace(*f.v))
		switch {
		case *f.v == "":
			bad(f.field, "is required")
		case !specVersionRE().MatchString(*f.v):
			bad(f.field, "%q is not a version like 1.2.3 or v1.2.3", *f.v)
		}
	}
	var refs []string
	for i, r := range u.ContainerImages {
		r = strings.TrimSpace(r)
		switch {
		case r == "" || slices.Contains(refs, r):
			continue
		case !imageRefRE().MatchString(r):
			bad(fmt.Sprintf("containerImages[%d]", i), "%q is not an image reference", r)
		}
		refs = append(refs, r)
	}
	sort.Strings(refs)
	u.ContainerImages = refs
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &u, nil
}

// upstreamArch is the arch of an upstream bundle in dir: the one under
// kubernetes/v<version>/bin/linux/, or this host's when the bundle holds
// several (upstream's builder can write more than one into one dir).
func upstreamArch(dir, kubernetes string) (string, error) {
	base := filepath.Join(dir, "kubernetes", "v"+kubernetes, "bin", "linux")
	des, err := os.ReadDir(base)
	if err != nil {
		return "", fmt.Errorf("upstream's layout: no arch: %w", err)
	}
	var arches []string
	for _, de := range des {
		if de.IsDir() {
			arches = append(arches, de.Name())
		}
	}
	switch {
	case len(arches) == 1:
		return arches[0], nil
	case slices.Contains(arches, runtime.GOARCH):
		return runtime.GOARCH, nil
	case len(arches) == 0:
		return "", fmt.Errorf("upstream's layout: %s holds no arch directory", base)
	}
	return "", fmt.Errorf("upstream's layout: %s holds %s, not this host's %s", base, strings.Join(arches, " and "), runtime.GOARCH)
}

// loadUpstream reads the upstream bundle in dir (whose manifest.json is
// data) as a Manifest: its files are the ones upstream's layout has for
// the manifest's versions and images and the arch found in dir, each
// with its size on disk and its sidecar's SHA-256. A file or sidecar that
// cannot be read is left with size -1 and no SHA-256, for verify to
// report by name.
func loadUpstream(dir, name string, data []byte) (*Manifest, error) {
	u, err := parseUpstream(name, data)
	if err != nil {
		return nil, err
	}
	v := u.Versions
	c := Components{Kubernetes: v.Kubernetes, Containerd: v.Containerd, Runc: v.Runc, CNI: v.CNI, Crictl: v.Crictl, KubeProxy: true}
	arch, err := upstreamArch(dir, c.Kubernetes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m := &Manifest{SchemaVersion: SchemaVersion, Arch: arch, Components: c, Files: []File{}, Images: []Image{}, Legal: []LegalFile{}, Layout: LayoutUpstream}
	add := func(rel, comp string) {
		f := File{Path: rel, Component: comp, Size: -1}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if fi, err := os.Stat(p); err == nil {
			f.Size = fi.Size()
		}
		if sum, err := readSidecar(p + ".sha256"); err == nil {
			f.SHA256 = sum
		}
		m.Files = append(m.Files, f)
	}
	for comp, rel := range UpstreamPaths(c, arch) {
		add(rel, comp)
	}
	for _, ref := range u.ContainerImages {
		im := Image{Path: UpstreamImagePath(arch, ref), Ref: ref}
		m.Images = append(m.Images, im)
		add(im.Path, ImageFile)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Images, func(i, j int) bool { return m.Images[i].Path < m.Images[j].Path })
	return m, nil
}

// writeUpstreamManifest writes m as upstream's manifest.json: the
// versions (Kubernetes with its leading "v", as upstream writes it) and
// the image references, no schemaVersion (upstream omits version 1).
func writeUpstreamManifest(dir string, m *Manifest) error {
	u := upstreamManifest{
		Versions: upstreamVersions{
			Kubernetes: "v" + m.Components.Kubernetes, Containerd: m.Components.Containerd,
			Runc: m.Components.Runc, CNI: m.Components.CNI, Crictl: m.Components.Crictl,
		},
		ContainerImages: []string{},
	}
	for _, im := range m.Images {
		u.ContainerImages = append(u.ContainerImages, im.Ref)
	}
	sort.Strings(u.ContainerImages)
	b, err := json.MarshalIndent(u, "", "  ")
	if err != nil {
		return err
	}
	_, err = fsutil.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644)
	return err
}

// buildLayoutCheck refuses what upstream's layout cannot hold.
func buildLayoutCheck(o BuildOptions) error {
	if err := ValidLayout(o.Layout); err != nil {
		return err
	}
	if o.Layout != LayoutUpstream {
		return nil
	}
	switch {
	case o.Spec.Components.Crictl == "":
		return errors.New("upstream's layout needs crictl: set components.crictl in the spec")
	case o.WorkerImage != "":
		return errors.New("--worker-image: upstream's layout has no place for a worker image (set bootstrap.ociImage on the nodes instead)")
	case o.LegalDir != "":
		return errors.New("--legal-files-dir: upstream's layout has no place for legal files")
	}
	return nil
}

// paths maps each component to its path in the layout being built.
func (b *builder) paths() map[string]string {
	if b.o.Layout == LayoutUpstream {
		return UpstreamPaths(b.o.Spec.Components, b.arch)
	}
	return BundlePaths(b.o.Spec.Components, b.arch)
}

// Package artifact owns the Kubernetes node binaries and images the agent
// installs into a machine: the offline bundle format (docs/offline-bundle.md)
// and its manifest, in this product's layout or upstream's (upstream.go), verification of every file against the manifest and
// its .sha256 sidecar, installation into a machine rootfs, verified
// downloads from the upstream release sites into the same layout, and
// staging for start (stage.go): where a bundle is staged on the host, the
// verified-once cache, the verification records (record.go) that spare a
// converged re-run from hashing it again, and the components stamp that
// spares it from installing again.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// ManifestName is the bundle's index file.
const ManifestName = "manifest.json"

// SchemaVersion is the manifest schema this package reads and writes.
const SchemaVersion = 1

// Component tags of manifest files.
const (
	Kubelet    = "kubelet"
	Kubectl    = "kubectl"
	Containerd = "containerd"
	Runc       = "runc"
	CNI        = "cni"
	Crictl     = "crictl"
	ImageFile  = "image"
)

var knownComponents = map[string]bool{Kubelet: true, Kubectl: true, KubeProxy: true, Containerd: true, Runc: true, CNI: true, Crictl: true, ImageFile: true, WorkerImageFile: true}

// Components are versions, written without a leading "v". In a manifest
// they say what the bundle holds; passed to Verify they are what the
// config asks for, and empty fields are not compared.
type Components struct {
	Kubernetes string `json:"kubernetes"`
	Containerd string `json:"containerd"`
	Runc       string `json:"runc"`
	CNI        string `json:"cni"`
	Crictl     string `json:"crictl,omitempty"`
	// KubeProxy says the bundle carries kube-proxy (at Kubernetes'
	// version), which a node with networking.kubeProxy "agent" runs;
	// passed to Verify, true asks for it. Upstream's layout always
	// carries it.
	KubeProxy bool `json:"kubeProxy,omitempty"`
}

// File is one payload file of a bundle.
type File struct {
	Path      string `json:"path"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	Component string `json:"component"`
}

// Image is an image archive for `ctr images import` and the reference it
// holds.
type Image struct {
	Path string `json:"path"`
	Ref  string `json:"ref"`
}

// LegalFile is a license or notice file shipped with a bundle, under
// legal/. It is not installed; it is there for the people who redistribute
// the bundle.
type LegalFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Manifest is manifest.json. Producers (artifacts build, the test
// fixtures) and consumers (start, verify, preflight) share this one type.
type Manifest struct {
	SchemaVersion int         `json:"schemaVersion"`
	Arch          string      `json:"arch"`
	Components    Components  `json:"components"`
	Files         []File      `json:"files"`
	Images        []Image     `json:"images"`
	Legal         []LegalFile `json:"legal"`
	// WorkerImage is the worker image the bundle carries (worker.go);
	// nil when it carries none.
	WorkerImage *WorkerImage `json:"workerImage,omitempty"`
	// Layout is the layout the bundle was read in: LayoutNative, or
	// LayoutUpstream for a manifest read by loadUpstream (upstream.go).
	Layout string `json:"-"`
}

// File returns the entry for path, or nil.
func (m *Manifest) File(p string) *File {
	for i := range m.Files {
		if m.Files[i].Path == p {
			return &m.Files[i]
		}
	}
	return nil
}

// ResolveSource expands bootstrap.offlineArtifacts.source (a Go template
// over .KubernetesVersion) and strips file://, returning an absolute
// directory. An oci:// source is returned as it is.
func ResolveSource(tmpl, kubernetesVersion string) (string, error) {
	t, err := template.New("source").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("bootstrap.offlineArtifacts.source %q: %w", tmpl, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, struct{ KubernetesVersion string }{kubernetesVersion}); err != nil {
		return "", fmt.Errorf("bootstrap.offlineArtifacts.source %q: %w", tmpl, err)
	}
	s := b.String()
	if strings.HasPrefix(s, "oci://") {
		return s, nil
	}
	s = strings.TrimPrefix(s, "file://")
	if !strings.HasPrefix(s, "/") {
		return "", fmt.Errorf("bootstrap.offlineArtifacts.source %q expands to %q, which is not an absolute path, file:///path or oci:// reference", tmpl, b.String())
	}
	return filepath.Clean(s), nil
}

// validRel accepts the relative, clean, slash-separated paths a bundle may
// name, so that joining one to the bundle dir cannot leave it.
func validRel(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute", p)
	case path.Clean(p) != p || p == ".":
		return fmt.Errorf("%q is not a clean relative path", p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("%q leaves the bundle", p)
	case strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("%q contains a NUL or backslash", p)
	}
	return nil
}

func validHex(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// LoadManifest reads and checks dir/manifest.json: a regular file (a
// named pipe there is refused, not waited on), strict JSON, schema
// version, and paths that stay inside the bundle. A manifest in
// upstream's layout is detected and read as upstream's (upstream.go).
func LoadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return parseManifestIn(dir, p, data)
}

// parseManifestIn parses the manifest of the bundle in dir in the layout
// it is in: upstream's derives its file list from dir.
func parseManifestIn(dir, name string, data []byte) (*Manifest, error) {
	if len(data) > maxManifest {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxManifest)
	}
	if l, err := DetectLayout(name, data); err == nil && l == LayoutUpstream {
		return loadUpstream(dir, name, data)
	}
	return ParseManifest(name, data)
}

// maxManifest bounds manifest.json, which is read whole.
const maxManifest = 16 << 20

// ParseManifest decodes and checks manifest bytes in this product's
// layout; name says where they came from (a path or a registry
// reference) in errors. Upstream's layout is refused here, naming it: its
// file list comes from the bundle dir (LoadManifest).
func ParseManifest(name string, data []byte) (*Manifest, error) {
	p := name
	if len(data) > maxManifest {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, maxManifest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		if l, lerr := DetectLayout(p, data); lerr == nil && l == LayoutUpstream {
			return nil, fmt.Errorf("%s is in upstream's layout, which is read from a bundle directory (a path or file://), not from here", p)
		}
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the manifest object", p)
	}
	m.Layout = LayoutNative
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", p, field, fmt.Sprintf(format, a...)))
	}
	if m.SchemaVersion != SchemaVersion {
		bad("schemaVersion", "%d is not supported (want %d)", m.SchemaVersion, SchemaVersion)
	}
	if m.Arch == "" {
		bad("arch", "is empty")
	}
	seen := map[string]bool{}
	for i, fe := range m.Files {
		field := fmt.Sprintf("files[%d]", i)
		if err := validRel(fe.Path); err != nil {
			bad(field+".path", "%v", err)
		}
		if seen[fe.Path] {
			bad(field+".path", "%q is listed twice", fe.Path)
		}
		seen[fe.Path] = true
		if !validHex(fe.SHA256) {
			bad(field+".sha256", "%q is not a lowercase hex SHA-256", fe.SHA256)
		}
		if fe.Size < 0 {
			bad(field+".size", "%d is negative", fe.Size)
		}
		if !knownComponents[fe.Component] {
			bad(field+".component", "%q is not one of kubelet, kubectl, kube-proxy, containerd, runc, cni, crictl, image, worker-image", fe.Component)
		}
	}
	for i, im := range m.Images {
		if err := validRel(im.Path); err != nil {
			bad(fmt.Sprintf("images[%d].path", i), "%v", err)
		}
	}
	for i, l := range m.Legal {
		field := fmt.Sprintf("legal[%d]", i)
		if err := validRel(l.Path); err != nil {
			bad(field+".path", "%v", err)
		} else if seen[l.Path] {
			bad(field+".path", "%q is listed twice", l.Path)
		}
		seen[l.Path] = true
		if !validHex(l.SHA256) {
			bad(field+".sha256", "%q is not a lowercase hex SHA-256", l.SHA256)
		}
		if l.Size < 0 {
			bad(field+".size", "%d is negative", l.Size)
		}
	}
	if m.Legal == nil {
		m.Legal = []LegalFile{}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &m, nil
}

// BundlePaths maps each component to its path in a bundle for versions c
// and arch, following the upstream release layout. crictl is included
// only when c.Crictl is set, kube-proxy only when c.KubeProxy is.
func BundlePaths(c Components, arch string) map[string]string {
	k, cd, r, n, t := c.Kubernetes, c.Containerd, c.Runc, c.CNI, c.Crictl
	m := map[string]string{
		Kubelet:    fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kubelet", k, arch),
		Kubectl:    fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kubectl", k, arch),
		Containerd: fmt.Sprintf("containerd/v%s/containerd-%s-linux-%s.tar.gz", cd, cd, arch),
		Runc:       fmt.Sprintf("runc/v%s/runc.%s", r, arch),
		CNI:        fmt.Sprintf("cni-plugins/v%s/cni-plugins-linux-%s-v%s.tgz", n, arch, n),
	}
	if t != "" {
		m[Crictl] = fmt.Sprintf("cri-tools/v%s/crictl-v%s-linux-%s.tar.gz", t, t, arch)
	}
	if c.KubeProxy {
		m[KubeProxy] = fmt.Sprintf("kubernetes/v%s/bin/linux/%s/kube-proxy", k, arch)
	}
	return m
}

// BuildManifest describes the bundle in dir: the component files at their
// BundlePaths for c and arch and the image archives, hashed from disk.
// It writes each file's .sha256 sidecar when it is missing or stale, and
// is how a bundle producer (or a test) makes one after Fetch.
func BuildManifest(ctx context.Context, dir, arch string, c Components, images []Image) (*Manifest, error) {
	m := &Manifest{SchemaVersion: SchemaVersion, Arch: arch, Components: c, Images: images, Legal: []LegalFile{}}
	add := func(rel, component string) error {
		sum, n, err := hashFile(ctx, filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		if _, err := fsutil.WriteFile(filepath.Join(dir, rel)+".sha256", []byte(sum+"  "+path.Base(rel)+"\n"), 0o644); err != nil {
			return err
		}
		m.Files = append(m.Files, File{Path: rel, SHA256: sum, Size: n, Component: component})
		return nil
	}
	for comp, rel := range BundlePaths(c, arch) {
		if err := add(rel, comp); err != nil {
			return nil, err
		}
	}
	for _, im := range images {
		if err := validRel(im.Path); err != nil {
			return nil, err
		}
		if err := add(im.Path, ImageFile); err != nil {
			return nil, err
		}
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

// WriteManifest writes m as dir/manifest.json, atomically.
func WriteManifest(dir string, m *Manifest) (bool, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return false, err
	}
	return fsutil.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644)
}

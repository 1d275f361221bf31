package artifact

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/Azure/aks-flex-node/internal/config"
)

// A bundle may carry the worker image, so that an air-gapped site needs
// nothing but the bundle: an OCI image layout holding exactly one image
// for the bundle's arch under images/worker/, every file of it listed
// (component worker-image, with sidecars like every payload file) and
// the image named by its manifest digest in the manifest's workerImage.
// start uses it when bootstrap.ociImage is empty.

// WorkerImageFile is the component of the worker image's files.
const WorkerImageFile = "worker-image"

// WorkerImageDir is where a bundle holds the worker image.
const WorkerImageDir = "images/worker"

// WorkerImage is the bundle's worker image: the layout dir and the
// manifest digest and tag of the one image in it.
type WorkerImage struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
	Tag    string `json:"tag"`
}

// WorkerImageRef is the oci-layout:// reference of the worker image of
// the bundle at hostDir (a host path), pinned by digest; "" when the
// bundle carries none.
func (m *Manifest) WorkerImageRef(hostDir string) string {
	if m.WorkerImage == nil {
		return ""
	}
	return "oci-layout://" + path.Join(hostDir, m.WorkerImage.Path) + "@" + m.WorkerImage.Digest
}

// workerImage copies the image o.WorkerImage names (an OCI layout dir
// holding one image, or oci-layout:///dir:tag / @sha256:...) into the
// bundle as a layout of that one image for the bundle's arch, with the
// image builder's lock file and SBOM when they are next to it.
func (b *builder) workerImage() error {
	src := b.o.WorkerImage
	if src == "" {
		return nil
	}
	dir, want := src, ""
	if strings.HasPrefix(src, "oci-layout://") {
		var err error
		if dir, want, err = config.ParseOCILayoutRef(src); err != nil {
			return fmt.Errorf("--worker-image: %w", err)
		}
	}
	img, tag, err := pickImage(dir, want, b.arch)
	if err != nil {
		return fmt.Errorf("--worker-image %s: %w", src, err)
	}
	dst := filepath.Join(b.dir, filepath.FromSlash(WorkerImageDir))
	if err := mkdirs(b.dir, WorkerImageDir); err != nil {
		return err
	}
	p, err := layout.Write(dst, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: tag})); err != nil {
		return fmt.Errorf("--worker-image %s: copy the image: %w", src, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	for _, extra := range []string{"worker.lock.json", "sbom.spdx.json"} {
		if _, err := os.Stat(filepath.Join(dir, extra)); err == nil {
			if _, err := copyFile(b.ctx, filepath.Join(dir, extra), b.dir, WorkerImageDir+"/"+extra); err != nil {
				return err
			}
		}
	}
	err = filepath.WalkDir(dst, func(p string, de fs.DirEntry, err error) error {
		if err != nil || strings.HasSuffix(p, ".sha256") {
			return err
		}
		if de.IsDir() {
			return os.Chmod(p, 0o755)
		}
		rel, _ := filepath.Rel(b.dir, p)
		if err := os.Chmod(p, 0o644); err != nil {
			return err
		}
		sum, n, err := hashFile(b.ctx, p)
		if err != nil {
			return err
		}
		b.m.Files = append(b.m.Files, File{Path: filepath.ToSlash(rel), SHA256: sum, Size: n, Component: WorkerImageFile})
		return writeSidecar(p, sum)
	})
	if err != nil {
		return err
	}
	b.m.WorkerImage = &WorkerImage{Path: WorkerImageDir, Digest: d.String(), Tag: tag}
	return nil
}

const annotationRefName = "org.opencontainers.image.ref.name"

// pickImage finds the image in the layout at dir: the one with ref.name
// (or digest) want, or the only one; from an index, the manifest for
// linux/arch. It returns the image and the tag to give it.
func pickImage(dir, want, arch string) (v1.Image, string, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("not an OCI image layout: %w", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, "", err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	var cands []v1.Descriptor
	for _, d := range im.Manifests {
		if want == "" || d.Digest.String() == want || d.Annotations[annotationRefName] == want {
			cands = append(cands, d)
		}
	}
	switch {
	case len(cands) == 0:
		return nil, "", fmt.Errorf("no image %q in %s/index.json", want, dir)
	case len(cands) > 1:
		return nil, "", fmt.Errorf("%s/index.json holds %d images: name one (oci-layout://%s:TAG)", dir, len(cands), dir)
	}
	d := cands[0]
	tag := d.Annotations[annotationRefName]
	if tag == "" || strings.Contains(tag, "/") {
		tag = "worker"
	}
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, "", err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, "", err
		}
		for _, c := range cm.Manifests {
			if c.Platform != nil && c.Platform.OS == "linux" && c.Platform.Architecture == arch {
				img, err := child.Image(c.Digest)
				return img, tag, err
			}
		}
		return nil, "", fmt.Errorf("image %s has no linux/%s manifest", d.Digest, arch)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", err
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		return nil, "", fmt.Errorf("image %s is for %s/%s, the bundle for linux/%s", d.Digest, cf.OS, cf.Architecture, arch)
	}
	return img, tag, nil
}

// workerImageProblems checks the worker image a manifest names against
// the files the manifest lists (already hashed by verify): its layout
// files are listed, every blob is named by its SHA-256, and index.json
// names the manifest digest, whose config is for the bundle's arch.
func workerImageProblems(dir string, m *Manifest) []Problem {
	wi := m.WorkerImage
	if wi == nil {
		return nil
	}
	where := filepath.Join(dir, ManifestName)
	var ps []Problem
	add := func(p, format string, a ...any) { ps = append(ps, Problem{p, fmt.Sprintf(format, a...)}) }
	if wi.Path != WorkerImageDir || !strings.HasPrefix(wi.Digest, "sha256:") || !validHex(strings.TrimPrefix(wi.Digest, "sha256:")) {
		add(where, "workerImage: path %q, digest %q: want %s and a sha256 digest", wi.Path, wi.Digest, WorkerImageDir)
		return ps
	}
	files := map[string]*File{}
	for i := range m.Files {
		f := &m.Files[i]
		if strings.HasPrefix(f.Path, WorkerImageDir+"/") != (f.Component == WorkerImageFile) {
			add(where, "file %s: component %s, but worker image files are exactly those under %s/", f.Path, f.Component, WorkerImageDir)
			continue
		}
		if f.Component != WorkerImageFile {
			continue
		}
		files[f.Path] = f
		if b := path.Base(f.Path); path.Dir(f.Path) == WorkerImageDir+"/blobs/sha256" && b != f.SHA256 {
			add(filepath.Join(dir, filepath.FromSlash(f.Path)), "blob is named %s but its sha256 is %s", b, f.SHA256)
		}
	}
	blob := func(digest string) string {
		return WorkerImageDir + "/blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
	}
	for _, need := range []string{WorkerImageDir + "/oci-layout", WorkerImageDir + "/index.json", blob(wi.Digest)} {
		if files[need] == nil {
			add(where, "workerImage %s: %s is not listed", wi.Digest, need)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	var idx v1.IndexManifest
	if err := readJSON(dir, WorkerImageDir+"/index.json", &idx); err != nil {
		return []Problem{{filepath.Join(dir, filepath.FromSlash(WorkerImageDir), "index.json"), err.Error()}}
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest.String() != wi.Digest {
		return []Problem{{filepath.Join(dir, filepath.FromSlash(WorkerImageDir), "index.json"), fmt.Sprintf("does not name exactly the manifest workerImage names (%s)", wi.Digest)}}
	}
	var man v1.Manifest
	if err := readJSON(dir, blob(wi.Digest), &man); err != nil {
		return []Problem{{filepath.Join(dir, filepath.FromSlash(blob(wi.Digest))), err.Error()}}
	}
	need := []string{man.Config.Digest.String()}
	for _, l := range man.Layers {
		need = append(need, l.Digest.String())
	}
	sort.Strings(need[1:])
	for _, d := range need {
		if files[blob(d)] == nil {
			add(where, "workerImage %s: blob %s is not listed", wi.Digest, d)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	var cf v1.ConfigFile
	if err := readJSON(dir, blob(man.Config.Digest.String()), &cf); err != nil {
		return []Problem{{filepath.Join(dir, filepath.FromSlash(blob(man.Config.Digest.String()))), err.Error()}}
	}
	if cf.OS != "linux" || cf.Architecture != m.Arch {
		add(where, "workerImage %s is for %s/%s, the bundle for linux/%s", wi.Digest, cf.OS, cf.Architecture, m.Arch)
	}
	return ps
}

// maxJSONBlob bounds the index, manifest and config read whole.
const maxJSONBlob = 4 << 20

func readJSON(dir, rel string, v any) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Size() > maxJSONBlob {
		return fmt.Errorf("%d bytes: too large", fi.Size())
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

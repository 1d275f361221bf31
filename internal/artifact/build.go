package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Spec is the input of `artifacts build`: what one bundle holds. Its
// format is documented in docs/offline-bundle.md.
type Spec struct {
	SchemaVersion int        `json:"schemaVersion"`
	Arch          string     `json:"arch,omitempty"`
	Components    Components `json:"components"`
	Images        []Image    `json:"images,omitempty"`
}

var (
	specVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$`)
	archRE        = regexp.MustCompile(`^(amd64|arm64)$`)
	imageRefRE    = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$`)
)

// LoadSpec reads and validates a build spec strictly: unknown fields are
// errors, and every problem names its JSON path.
func LoadSpec(p string) (*Spec, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return ParseSpec(p, data)
}

// ParseSpec is LoadSpec on bytes; name is where they came from.
func ParseSpec(name string, data []byte) (*Spec, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("%s: %s: %s is not a JSON %s", name, te.Field, te.Value, te.Type)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: data after the spec object", name)
	}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", name, field, fmt.Sprintf(format, a...)))
	}
	if s.SchemaVersion != SchemaVersion {
		bad("schemaVersion", "%d is not supported (want %d)", s.SchemaVersion, SchemaVersion)
	}
	if s.Arch != "" && !archRE.MatchString(s.Arch) {
		bad("arch", "%q is not amd64 or arm64", s.Arch)
	}
	for _, c := range []struct {
		field, v string
		required bool
	}{
		{"components.kubernetes", s.Components.Kubernetes, true},
		{"components.containerd", s.Components.Containerd, true},
		{"components.runc", s.Components.Runc, true},
		{"components.cni", s.Components.CNI, true},
		{"components.crictl", s.Components.Crictl, false},
	} {
		switch {
		case c.v == "" && c.required:
			bad(c.field, "is required")
		case c.v != "" && !specVersionRE.MatchString(c.v):
			bad(c.field, "%q is not a version like 1.2.3 (no leading v)", c.v)
		}
	}
	seen := map[string]bool{}
	for i, im := range s.Images {
		field := fmt.Sprintf("images[%d]", i)
		if err := validRel(im.Path); err != nil {
			bad(field+".path", "%v", err)
		} else if !strings.HasPrefix(im.Path, "images/") || !strings.HasSuffix(im.Path, ".tar") || strings.Count(im.Path, "/") != 1 {
			bad(field+".path", "%q must be images/<name>.tar", im.Path)
		} else if seen[im.Path] {
			bad(field+".path", "%q is listed twice", im.Path)
		}
		seen[im.Path] = true
		if !imageRefRE.MatchString(im.Ref) {
			bad(field+".ref", "%q is not an image reference like registry.k8s.io/pause:3.10", im.Ref)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &s, nil
}

// BuildOptions are the inputs of Build.
type BuildOptions struct {
	Spec *Spec
	// Arch overrides Spec.Arch ("" means Spec.Arch); they must agree when
	// both are set.
	Arch      string
	OutputDir string
	// FromDir is a local source tree laid out like the bundle (a mirror of
	// the upstream download paths, image archives under images/). Empty
	// means the upstream release sites, with image archives pulled by
	// PullImage.
	FromDir string
	// LegalDir, when set, must hold a LICENSE; notice files are included
	// when present. Empty includes no legal files.
	LegalDir string
	// Upstream and Client are for the online mode (tests point them at a
	// local server).
	Upstream Upstream
	Client   *http.Client
	// PullImage writes the image ref for linux/arch as an image archive
	// at dst (online mode only); Registry.PullImageArchive is the real one.
	PullImage func(ctx context.Context, ref, arch, dst string) error
	// Note receives one-line notes (a missing NOTICE, say); nil drops them.
	Note func(string)
}

// BuildMtime is the modification time of every file and directory Build
// writes, so that an archive of the output dir (tar, rsync -t) is the same
// for the same inputs too.
var BuildMtime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Build writes a bundle into o.OutputDir, which must be absent or empty.
// The same inputs give byte-identical output: files are copied verbatim,
// lists are sorted, sidecars and the manifest have one fixed rendering,
// and files and directories get fixed modes and mtimes (BuildMtime). The bundle is assembled in a
// temp dir next to OutputDir, verified, and renamed into place, so a
// failed build leaves nothing that looks like a bundle.
func Build(ctx context.Context, o BuildOptions) (*Manifest, error) {
	s := o.Spec
	arch := s.Arch
	switch {
	case o.Arch != "" && s.Arch != "" && o.Arch != s.Arch:
		return nil, fmt.Errorf("--arch %s disagrees with the spec's arch %s", o.Arch, s.Arch)
	case o.Arch != "":
		arch = o.Arch
	}
	if !archRE.MatchString(arch) {
		return nil, fmt.Errorf("arch %q is not amd64 or arm64 (set --arch or the spec's arch)", arch)
	}
	out := filepath.Clean(o.OutputDir)
	if des, err := os.ReadDir(out); err == nil && len(des) > 0 {
		return nil, fmt.Errorf("output dir %s is not empty: give a new or empty directory", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := fsutil.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".build-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	m := &Manifest{SchemaVersion: SchemaVersion, Arch: arch, Components: s.Components, Files: []File{}, Images: []Image{}, Legal: []LegalFile{}}

	comps := BundlePaths(s.Components, arch)
	names := make([]string, 0, len(comps))
	for c := range comps {
		names = append(names, c)
	}
	sort.Strings(names)
	if o.FromDir != "" {
		mirror := map[string]Download{}
		for _, d := range o.Upstream.URLs(s.Components, arch) {
			mirror[d.Component] = d
		}
		for _, c := range names {
			f, err := copyIn(ctx, o.FromDir, tmp, comps[c])
			if d, ok := mirror[c]; ok && errors.Is(err, fs.ErrNotExist) {
				f, err = copyMirrored(ctx, o.FromDir, tmp, d)
			}
			if err != nil {
				return nil, err
			}
			f.Component = c
			m.Files = append(m.Files, f)
		}
	} else {
		if err := Fetch(ctx, o.Client, o.Upstream.URLs(s.Components, arch), tmp); err != nil {
			return nil, err
		}
		for _, c := range names {
			sum, n, err := hashFile(ctx, filepath.Join(tmp, comps[c]))
			if err != nil {
				return nil, err
			}
			if err := os.Chmod(filepath.Join(tmp, comps[c]), 0o644); err != nil {
				return nil, err
			}
			m.Files = append(m.Files, File{Path: comps[c], SHA256: sum, Size: n, Component: c})
		}
	}
	for _, im := range s.Images {
		var f File
		if o.FromDir == "" && !strings.Contains(im.Ref, "@sha256:") && o.Note != nil {
			o.Note(fmt.Sprintf("note: image %s is pulled by tag only: a later build may get different content; pin it as %s@sha256:<digest> for a reproducible bundle", im.Ref, im.Ref))
		}
		if o.FromDir != "" {
			if f, err = copyIn(ctx, o.FromDir, tmp, im.Path); err != nil {
				return nil, err
			}
		} else {
			if o.PullImage == nil {
				return nil, fmt.Errorf("image %s: no --from-dir and no image puller", im.Ref)
			}
			dst := filepath.Join(tmp, filepath.FromSlash(im.Path))
			if err := fsutil.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			if err := o.PullImage(ctx, im.Ref, arch, dst); err != nil {
				return nil, fmt.Errorf("image %s: %w", im.Ref, err)
			}
			if err := os.Chmod(dst, 0o644); err != nil {
				return nil, err
			}
			sum, n, err := hashFile(ctx, dst)
			if err != nil {
				return nil, err
			}
			f = File{Path: im.Path, SHA256: sum, Size: n}
			if err := writeSidecar(dst, sum); err != nil {
				return nil, err
			}
		}
		f.Component = ImageFile
		m.Files = append(m.Files, f)
		m.Images = append(m.Images, im)
	}
	if o.LegalDir != "" {
		legal, notes, err := collectLegal(o.LegalDir)
		if err != nil {
			return nil, err
		}
		for _, n := range notes {
			if o.Note != nil {
				o.Note(n)
			}
		}
		for _, name := range legal {
			rel := "legal/" + name
			f, err := copyFile(ctx, filepath.Join(o.LegalDir, name), tmp, rel)
			if err != nil {
				return nil, err
			}
			m.Legal = append(m.Legal, LegalFile{Path: rel, SHA256: f.SHA256, Size: f.Size})
		}
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Images, func(i, j int) bool { return m.Images[i].Path < m.Images[j].Path })
	sort.Slice(m.Legal, func(i, j int) bool { return m.Legal[i].Path < m.Legal[j].Path })
	if _, err := WriteManifest(tmp, m); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(tmp, ManifestName), 0o644); err != nil {
		return nil, err
	}
	if _, ps := VerifyIntegrity(ctx, tmp); len(ps) > 0 {
		return nil, fmt.Errorf("self-check of the built bundle: %w", Problems(ps))
	}
	if err := fixMtimes(tmp); err != nil {
		return nil, err
	}
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, err
	}
	return m, os.Chtimes(out, BuildMtime, BuildMtime)
}

// fixMtimes sets BuildMtime on everything under dir. Setting a time
// changes no directory's mtime, so the order does not matter.
func fixMtimes(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, BuildMtime, BuildMtime)
	})
}

// copyIn copies src/rel into the bundle at rel. A <rel>.sha256 next to
// the source (what a mirror of the release site has for most files) must
// agree with the content.
func copyIn(ctx context.Context, src, bundle, rel string) (File, error) {
	from := filepath.Join(src, filepath.FromSlash(rel))
	f, err := copyFile(ctx, from, bundle, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f, fmt.Errorf("--from-dir %s has no %s (the tree uses the bundle's paths, or for components the upstream mirror paths; see docs/offline-bundle.md): %w", src, rel, err)
		}
		return f, err
	}
	if side, err := readSidecar(from + ".sha256"); err == nil && side != f.SHA256 {
		return f, fmt.Errorf("%s: sha256 %s != %s.sha256 %s", from, f.SHA256, filepath.Base(from), side)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("%s.sha256: %w", from, err)
	}
	return f, nil
}

// copyMirrored copies a component from its place in a `wget -x` mirror of
// the upstream release URLs, checked against the mirrored upstream
// checksum file, which must be there: it is the only thing that vouches
// for the content.
func copyMirrored(ctx context.Context, src, bundle string, d Download) (File, error) {
	from := filepath.Join(src, filepath.FromSlash(MirrorPath(d.URL)))
	sumPath := filepath.Join(src, filepath.FromSlash(MirrorPath(d.SHA256URL)))
	if _, err := os.Stat(from); err != nil {
		return File{}, fmt.Errorf("--from-dir %s has neither %s nor the mirrored %s (see docs/offline-bundle.md): %w", src, d.Path, MirrorPath(d.URL), err)
	}
	cf, err := os.Open(sumPath)
	if err != nil {
		return File{}, fmt.Errorf("--from-dir %s: %s needs its mirrored checksum file: %w", src, MirrorPath(d.URL), err)
	}
	want, err := parseChecksum(cf, path.Base(d.URL))
	cf.Close()
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", sumPath, err)
	}
	f, err := copyFile(ctx, from, bundle, d.Path)
	if err != nil {
		return f, err
	}
	if f.SHA256 != want {
		return f, fmt.Errorf("%s: sha256 %s != %s from %s", from, f.SHA256, want, sumPath)
	}
	return f, nil
}

// copyFile streams from into bundle/rel (mode 0644, parents 0755) and
// writes its sidecar.
func copyFile(ctx context.Context, from, bundle, rel string) (File, error) {
	if err := validRel(rel); err != nil {
		return File{}, err
	}
	in, err := os.Open(from)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return File{}, err
	} else if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s is not a regular file", from)
	}
	dst := filepath.Join(bundle, filepath.FromSlash(rel))
	if err := mkdirs(bundle, path.Dir(rel)); err != nil {
		return File{}, err
	}
	cr := &countReader{r: in}
	sum, _, err := writeStream(ctx, dst, cr, 0o644, "", false)
	if err != nil {
		return File{}, fmt.Errorf("copy %s: %w", from, err)
	}
	return File{Path: rel, SHA256: sum, Size: cr.n}, writeSidecar(dst, sum)
}

// mkdirs creates rel's directories under root with mode 0755 regardless
// of the umask, so two builds have the same modes.
func mkdirs(root, rel string) error {
	if rel == "." || rel == "" {
		return nil
	}
	d := root
	for _, c := range strings.Split(rel, "/") {
		d = filepath.Join(d, c)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func writeSidecar(p, sum string) error {
	_, err := fsutil.WriteFile(p+".sha256", []byte(sum+"  "+filepath.Base(p)+"\n"), 0o644)
	if err != nil {
		return err
	}
	return os.Chmod(p+".sha256", 0o644)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// License and notice files, by name. LICENSE is what every redistribution
// must carry; notices are carried when the project has them.
var (
	licenseRE = regexp.MustCompile(`^LICENSE(\.(txt|md))?$`)
	noticeRE  = regexp.MustCompile(`^(NOTICE|THIRD_PARTY_NOTICES|ThirdPartyNotices)[A-Za-z0-9._-]*$`)
)

// collectLegal lists the legal files of dir, sorted: LICENSE is required
// (its absence is an error naming dir); notice files are optional and
// their absence is a note, never an error.
func collectLegal(dir string) (names, notes []string, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("--legal-files-dir %s: %w", dir, err)
	}
	var license, notice bool
	for _, de := range des {
		n := de.Name()
		isLicense, isNotice := licenseRE.MatchString(n), noticeRE.MatchString(n)
		if !isLicense && !isNotice {
			continue
		}
		// Links are followed (a repository may link LICENSE to a shared
		// copy); the content is copied, never linked. Only a LICENSE
		// that cannot be read is an error: a notice file that is not
		// there (a dangling link) or not a file is a note, because a
		// missing notice must never fail a build.
		fi, err := os.Stat(filepath.Join(dir, n))
		switch {
		case err != nil && isLicense:
			return nil, nil, fmt.Errorf("--legal-files-dir %s: %s: %w", dir, n, err)
		case err != nil:
			notes = append(notes, fmt.Sprintf("note: skipping %s in %s: %v", n, dir, oneLineErr(err)))
			continue
		case !fi.Mode().IsRegular() && isNotice:
			notes = append(notes, fmt.Sprintf("note: skipping %s in %s: not a regular file", n, dir))
			continue
		case !fi.Mode().IsRegular():
			continue
		}
		license = license || isLicense
		notice = notice || isNotice
		names = append(names, n)
	}
	if !license {
		return nil, nil, fmt.Errorf("--legal-files-dir %s has no LICENSE file (LICENSE, LICENSE.txt or LICENSE.md); add it, or leave --legal-files-dir unset to ship no legal files", dir)
	}
	if !notice {
		notes = append(notes, fmt.Sprintf("note: no NOTICE or THIRD_PARTY_NOTICES file in %s; the bundle carries the LICENSE only", dir))
	}
	sort.Strings(names)
	return names, notes, nil
}

// oneLineErr keeps an error inside a one-line note.
func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

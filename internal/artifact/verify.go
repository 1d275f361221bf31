package artifact

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Problem is one reason a bundle cannot be used. Path is the file it is
// about, as this process opened it (or the registry reference it came from).
type Problem struct {
	Path string
	Msg  string
}

func (p Problem) Error() string { return p.Path + ": " + p.Msg }

// Problems joins problems into one error, or nil when there are none.
func Problems(ps []Problem) error {
	errs := make([]error, len(ps))
	for i := range ps {
		errs[i] = ps[i]
	}
	return errors.Join(errs...)
}

func trimV(s string) string { return strings.TrimPrefix(s, "v") }

// Verify checks the bundle in dir against the config's versions (empty
// fields in want are not compared) and against itself: the manifest's
// arch is this host's, each component's file is where the release layout
// puts it for the manifest's versions, every image archive is a listed
// file, and every file (payload and legal) exists with the manifest's
// size and a streamed SHA-256 matching both the manifest and its .sha256
// sidecar; image archives must also read as image archives. Every file is
// checked and every problem reported, one per file.
func Verify(ctx context.Context, dir string, want Components) []Problem {
	_, ps := verify(ctx, dir, want, runtime.GOARCH)
	return ps
}

// VerifyFor is Verify for another arch ("" skips the arch check), and
// also returns the manifest when it could be read.
func VerifyFor(ctx context.Context, dir string, want Components, arch string) (*Manifest, []Problem) {
	return verify(ctx, dir, want, arch)
}

// VerifyIntegrity is Verify without the config and host comparisons: what
// a producer checks before publishing a bundle for another arch.
func VerifyIntegrity(ctx context.Context, dir string) (*Manifest, []Problem) {
	return verify(ctx, dir, Components{}, "")
}

// versionProblems compares the manifest with the config's versions and
// with arch ("" skips the arch); the message names both sides.
func versionProblems(m *Manifest, where string, want Components, arch string) []Problem {
	var ps []Problem
	if arch != "" && m.Arch != arch {
		ps = append(ps, Problem{where, fmt.Sprintf("manifest arch %s != host arch %s", m.Arch, arch)})
	}
	for _, c := range []struct{ name, have, field, want string }{
		{"kubernetes", m.Components.Kubernetes, "components.kubernetes", want.Kubernetes},
		{"containerd", m.Components.Containerd, "components.containerd", want.Containerd},
		{"runc", m.Components.Runc, "components.runc", want.Runc},
		{"cni", m.Components.CNI, "networking.cniVersion", want.CNI},
		{"crictl", m.Components.Crictl, "components.crictl", want.Crictl},
	} {
		if c.want != "" && trimV(c.have) != trimV(c.want) {
			ps = append(ps, Problem{where, fmt.Sprintf("manifest %s %s != config %s %s", c.name, c.have, c.field, c.want)})
		}
	}
	if want.KubeProxy && !m.Components.KubeProxy {
		ps = append(ps, Problem{where, "the bundle carries no kube-proxy, which networking.kubeProxy \"agent\" runs: build it with components.kubeProxy true in the spec, or set networking.kubeProxy to \"daemonset\""})
	}
	return ps
}

// layoutProblems checks that the manifest lists each component at its
// path in the bundle's layout and that every image is a file.
func layoutProblems(m *Manifest, where string) []Problem {
	var ps []Problem
	add := func(format string, a ...any) { ps = append(ps, Problem{where, fmt.Sprintf(format, a...)}) }
	byComponent := map[string][]string{}
	for _, f := range m.Files {
		byComponent[f.Component] = append(byComponent[f.Component], f.Path)
	}
	paths := BundlePaths(m.Components, m.Arch)
	if m.Layout == LayoutUpstream {
		paths = UpstreamPaths(m.Components, m.Arch)
	}
	for _, comp := range []string{Kubelet, Kubectl, KubeProxy, Containerd, Runc, CNI, Crictl} {
		expected, needed := paths[comp]
		got := byComponent[comp]
		switch {
		case !needed && len(got) == 0:
		case !needed && comp == KubeProxy:
			add("files list %s %v but components.kubeProxy is not true", comp, got)
		case !needed:
			add("files list %s %v but components.crictl is empty", comp, got)
		case len(got) == 0:
			add("no %s file listed (want %s)", comp, expected)
		case len(got) > 1 || got[0] != expected:
			add("%s file is %v, want %s for the manifest's components and arch", comp, got, expected)
		}
	}
	for _, im := range m.Images {
		f := m.File(im.Path)
		if f == nil || f.Component != ImageFile {
			add("image %s (%s) is not a files entry with component image", im.Path, im.Ref)
		}
	}
	return ps
}

func verify(ctx context.Context, dir string, want Components, arch string) (*Manifest, []Problem) {
	mp := filepath.Join(dir, ManifestName)
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, []Problem{{mp, err.Error()}}
	}
	ps := append(versionProblems(m, mp, want, arch), layoutProblems(m, mp)...)
	if len(ps) > 0 {
		return m, ps
	}
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return m, append(ps, Problem{dir, err.Error()})
		}
		if p := checkFile(ctx, dir, f.Path, f.SHA256, f.Size, f.Component == ImageFile, m.Layout == LayoutUpstream); p != nil {
			ps = append(ps, *p)
		}
	}
	for _, l := range m.Legal {
		if p := checkFile(ctx, dir, l.Path, l.SHA256, l.Size, false, false); p != nil {
			ps = append(ps, *p)
		}
	}
	if len(ps) == 0 {
		ps = workerImageProblems(dir, m)
	}
	return m, ps
}

// checkFile reads the file once: hashing it, and for an image archive
// walking its tar headers on the way. Only regular files are opened (a
// named pipe in a bundle is a problem, not a hang), and the size checked
// is that of the file opened. In upstream's layout (sidecarOnly) the
// manifest has no checksums: the sidecar is the one the hash must match,
// and wantSum is what it said when the manifest was read.
func checkFile(ctx context.Context, dir, rel, wantSum string, wantSize int64, image, sidecarOnly bool) *Problem {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		if sidecarOnly {
			return &Problem{p, fmt.Sprintf("upstream's layout has it for the manifest's versions and images, but it is unreadable: %v", err)}
		}
		return &Problem{p, fmt.Sprintf("listed in the manifest but unreadable: %v", err)}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return &Problem{p, err.Error()}
	} else if fi.Size() != wantSize {
		return &Problem{p, fmt.Sprintf("size %d != manifest size %d", fi.Size(), wantSize)}
	}
	side, err := readSidecar(p + ".sha256")
	if err != nil {
		return &Problem{p + ".sha256", err.Error()}
	}
	sum, imageErr, err := hashStream(ctx, f, image)
	switch {
	case err != nil:
		return &Problem{p, err.Error()}
	case sum != wantSum && !sidecarOnly:
		return &Problem{p, fmt.Sprintf("sha256 %s != manifest %s", sum, wantSum)}
	case sum != side || sum != wantSum:
		return &Problem{p, fmt.Sprintf("sha256 %s != %s.sha256 %s", sum, filepath.Base(p), side)}
	case imageErr != nil:
		return &Problem{p, "not a readable image archive: " + imageErr.Error()}
	}
	return nil
}

// hashStream hashes r; for an image archive it also walks the tar headers
// on the same pass and reports whether they make an image archive.
func hashStream(ctx context.Context, r io.Reader, image bool) (sum string, imageErr, err error) {
	if !image {
		sum, _, err = copyHashed(ctx, io.Discard, r)
		return sum, nil, err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := imageArchive(pr)
		pr.CloseWithError(err)
		done <- err
	}()
	sum, _, err = copyHashed(ctx, pw, r)
	pw.Close()
	imageErr = <-done
	return sum, imageErr, err
}

// imageArchive reads a tar stream to its end and wants the index of a
// docker-save (manifest.json) or OCI (index.json) archive at its top. It
// always drains r, so the hash on the other side of the pipe sees every
// byte.
func imageArchive(r io.Reader) error {
	tr := tar.NewReader(r)
	found := false
	var err error
	for {
		var hdr *tar.Header
		hdr, err = tr.Next()
		if err != nil {
			break
		}
		switch path.Clean(strings.TrimPrefix(hdr.Name, "./")) {
		case "manifest.json", "index.json":
			found = true
		}
	}
	_, _ = io.Copy(io.Discard, r)
	switch {
	case !errors.Is(err, io.EOF):
		return err
	case !found:
		return errors.New("no manifest.json or index.json")
	}
	return nil
}

// readSidecar returns the first field of a sha256sum-style file (a
// regular file; its first 4 KiB are read).
func readSidecar(p string) (string, error) {
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || !validHex(strings.ToLower(fields[0])) {
		return "", fmt.Errorf("does not start with a hex SHA-256")
	}
	return strings.ToLower(fields[0]), nil
}

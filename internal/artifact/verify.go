package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Problem is one reason a bundle cannot be used. Path is the file it is
// about, as this process opened it.
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
// file, and every file exists with the manifest's size and a streamed
// SHA-256 matching both the manifest and its .sha256 sidecar. File checks
// stop at the first mismatch, as docs/offline-bundle.md asks.
func Verify(ctx context.Context, dir string, want Components) []Problem {
	_, ps := verify(ctx, dir, want)
	return ps
}

func verify(ctx context.Context, dir string, want Components) (*Manifest, []Problem) {
	mp := filepath.Join(dir, ManifestName)
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, []Problem{{mp, err.Error()}}
	}
	var ps []Problem
	add := func(p, format string, a ...any) { ps = append(ps, Problem{p, fmt.Sprintf(format, a...)}) }

	if m.Arch != runtime.GOARCH {
		add(mp, "manifest arch %s != host arch %s", m.Arch, runtime.GOARCH)
	}
	for _, c := range []struct{ name, have, field, want string }{
		{"kubernetes", m.Components.Kubernetes, "components.kubernetes", want.Kubernetes},
		{"containerd", m.Components.Containerd, "components.containerd", want.Containerd},
		{"runc", m.Components.Runc, "components.runc", want.Runc},
		{"cni", m.Components.CNI, "networking.cniVersion", want.CNI},
		{"crictl", m.Components.Crictl, "components.crictl", want.Crictl},
	} {
		if c.want != "" && trimV(c.have) != trimV(c.want) {
			add(mp, "manifest %s %s != config %s %s", c.name, c.have, c.field, c.want)
		}
	}

	byComponent := map[string][]string{}
	for _, f := range m.Files {
		byComponent[f.Component] = append(byComponent[f.Component], f.Path)
	}
	for _, comp := range []string{Kubelet, Kubectl, Containerd, Runc, CNI, Crictl} {
		expected, needed := BundlePaths(m.Components, m.Arch)[comp]
		got := byComponent[comp]
		switch {
		case !needed && len(got) == 0:
		case !needed:
			add(mp, "files list %s %v but components.crictl is empty", comp, got)
		case len(got) == 0:
			add(mp, "no %s file listed (want %s)", comp, expected)
		case len(got) > 1 || got[0] != expected:
			add(mp, "%s file is %v, want %s for the manifest's components and arch", comp, got, expected)
		}
	}
	for _, im := range m.Images {
		f := m.File(im.Path)
		if f == nil || f.Component != ImageFile {
			add(mp, "image %s (%s) is not a files entry with component image", im.Path, im.Ref)
		}
	}
	if len(ps) > 0 {
		return m, ps
	}
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return m, []Problem{{dir, err.Error()}}
		}
		if p := checkFile(ctx, dir, f); p != nil {
			return m, []Problem{*p}
		}
	}
	return m, nil
}

func checkFile(ctx context.Context, dir string, f File) *Problem {
	p := filepath.Join(dir, filepath.FromSlash(f.Path))
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return &Problem{p, fmt.Sprintf("listed in the manifest but unreadable: %v", err)}
	case !fi.Mode().IsRegular():
		return &Problem{p, "is not a regular file"}
	case fi.Size() != f.Size:
		return &Problem{p, fmt.Sprintf("size %d != manifest size %d", fi.Size(), f.Size)}
	}
	side, err := readSidecar(p + ".sha256")
	if err != nil {
		return &Problem{p + ".sha256", err.Error()}
	}
	sum, _, err := hashFile(ctx, p)
	if err != nil {
		return &Problem{p, err.Error()}
	}
	if sum != f.SHA256 {
		return &Problem{p, fmt.Sprintf("sha256 %s != manifest %s", sum, f.SHA256)}
	}
	if sum != side {
		return &Problem{p, fmt.Sprintf("sha256 %s != %s.sha256 %s", sum, filepath.Base(p), side)}
	}
	return nil
}

// readSidecar returns the first field of a sha256sum-style file.
func readSidecar(p string) (string, error) {
	f, err := os.Open(p)
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

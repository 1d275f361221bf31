package artifact

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/transport"
)

// Download is one upstream release file, the checksum file that vouches
// for it, and its path in the bundle layout.
type Download struct {
	Component string
	URL       string
	SHA256URL string
	Path      string
}

// Upstream are the release download sites. Empty fields mean the real
// ones; tests point them at a local server.
type Upstream struct {
	KubernetesURL string // default https://dl.k8s.io
	GitHubURL     string // default https://github.com
}

// UpstreamURLs lists the downloads for components c on linux/arch from the
// upstream release sites.
func UpstreamURLs(c Components, arch string) []Download { return Upstream{}.URLs(c, arch) }

// URLs lists the downloads for components c on linux/arch, in bundle path
// order. crictl is included only when c.Crictl is set.
func (u Upstream) URLs(c Components, arch string) []Download {
	return u.urls(c, arch, BundlePaths(c, arch))
}

// urls lists the downloads of the components p maps to their bundle paths
// (this product's layout or upstream's, which adds kube-proxy).
func (u Upstream) urls(c Components, arch string, p map[string]string) []Download {
	k8s, gh := strings.TrimSuffix(u.KubernetesURL, "/"), strings.TrimSuffix(u.GitHubURL, "/")
	if k8s == "" {
		k8s = "https://dl.k8s.io"
	}
	if gh == "" {
		gh = "https://github.com"
	}
	var ds []Download
	for _, bin := range []string{Kubelet, Kubectl, KubeProxy} {
		if _, ok := p[bin]; !ok {
			continue
		}
		url := fmt.Sprintf("%s/release/v%s/bin/linux/%s/%s", k8s, c.Kubernetes, arch, bin)
		ds = append(ds, Download{bin, url, url + ".sha256", p[bin]})
	}
	rel := func(repo, version, file string) string {
		return fmt.Sprintf("%s/%s/releases/download/v%s/%s", gh, repo, version, file)
	}
	cd := rel("containerd/containerd", c.Containerd, path.Base(p[Containerd]))
	ds = append(ds, Download{Containerd, cd, cd + ".sha256sum", p[Containerd]})
	// runc publishes one checksum file for all its assets.
	ds = append(ds, Download{Runc, rel("opencontainers/runc", c.Runc, path.Base(p[Runc])), rel("opencontainers/runc", c.Runc, "runc.sha256sum"), p[Runc]})
	cni := rel("containernetworking/plugins", c.CNI, path.Base(p[CNI]))
	ds = append(ds, Download{CNI, cni, cni + ".sha256", p[CNI]})
	if c.Crictl != "" {
		ct := rel("kubernetes-sigs/cri-tools", c.Crictl, path.Base(p[Crictl]))
		ds = append(ds, Download{Crictl, ct, ct + ".sha256", p[Crictl]})
	}
	return ds
}

// Fetch downloads each file into destDir at its bundle path, under
// transport policy pol (the zero Policy is the product's: https, plain
// HTTP only from loopback, the default time bounds). The expected SHA-256
// comes from the upstream checksum file; the payload, at most
// transport.MaxFile bytes, streams to a temp file next to its destination
// while it is hashed, and is renamed into place only when it hashes to
// that value; its .sha256 sidecar is written after it. A file already
// present with the right hash is not downloaded again.
func Fetch(ctx context.Context, pol transport.Policy, downloads []Download, destDir string) error {
	for _, d := range downloads {
		if err := fetchOne(ctx, pol, d, destDir); err != nil {
			return fmt.Errorf("fetch %s: %w", d.Component, err)
		}
	}
	return nil
}

func fetchOne(ctx context.Context, pol transport.Policy, d Download, destDir string) error {
	if err := validRel(d.Path); err != nil {
		return err
	}
	dst := filepath.Join(destDir, filepath.FromSlash(d.Path))
	want, err := fetchChecksum(ctx, pol, d.SHA256URL, path.Base(d.URL))
	if err != nil {
		return err
	}
	sidecar := []byte(want + "  " + path.Base(d.Path) + "\n")
	if sum, _, err := hashFile(ctx, dst); err == nil && sum == want {
		_, err := fsutil.WriteFile(dst+".sha256", sidecar, 0o644)
		return err
	}
	if err := fsutil.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	body, err := pol.Get(ctx, d.URL, transport.MaxFile)
	if err != nil {
		return err
	}
	defer body.Close()
	if _, _, err := writeStream(ctx, dst, body, 0o644, want, false); err != nil {
		var me *MismatchError
		if errors.As(err, &me) {
			return fmt.Errorf("%s: sha256 %s != %s from %s", d.URL, me.Got, want, d.SHA256URL)
		}
		var te *transport.TimeoutError
		var tl *transport.TooLargeError
		if errors.As(err, &te) || errors.As(err, &tl) {
			return err // they name the URL
		}
		return fmt.Errorf("GET %s: %w", d.URL, err)
	}
	_, err = fsutil.WriteFile(dst+".sha256", sidecar, 0o644)
	return err
}

// maxChecksumFile caps an upstream checksum file (runc's lists every
// asset; a few KiB).
const maxChecksumFile = 1 << 20

// fetchChecksum reads a sha256sum-style checksum file and returns the
// hash for file: the line naming it, or the only hash when the file holds
// a bare one (dl.k8s.io's .sha256).
func fetchChecksum(ctx context.Context, pol transport.Policy, url, file string) (string, error) {
	body, err := pol.Get(ctx, url, maxChecksumFile)
	if err != nil {
		return "", err
	}
	defer body.Close()
	sum, err := parseChecksum(body, file)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	return sum, nil
}

// parseChecksum finds file's SHA-256 in a checksum file's content.
func parseChecksum(r io.Reader, file string) (string, error) {
	var only string
	lines := 0
	sc := bufio.NewScanner(io.LimitReader(r, maxChecksumFile))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		lines++
		sum := strings.ToLower(f[0])
		if !validHex(sum) {
			continue
		}
		if len(f) == 1 {
			only = sum
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(f[1], "*"), "./")
		if name == file || path.Base(name) == file {
			return sum, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if only != "" && lines == 1 {
		return only, nil
	}
	return "", fmt.Errorf("no SHA-256 for %s", file)
}

// MirrorPath is where a `wget -x` style mirror keeps url: host and path,
// no scheme ("https://dl.k8s.io/release/..." -> "dl.k8s.io/release/...").
func MirrorPath(url string) string {
	if _, rest, ok := strings.Cut(url, "://"); ok {
		return rest
	}
	return url
}

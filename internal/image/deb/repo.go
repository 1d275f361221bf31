package deb

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ulikunitz/xz"
)

// Getter fetches one URL under the caller's transport policy and returns
// its body, which the caller closes; the body must fail a read past max
// bytes.
type Getter func(ctx context.Context, url string, max int64) (io.ReadCloser, error)

// Mirror is one Debian or Ubuntu archive: its URL, how to reach it, and
// where fetched files are cached by their SHA-256.
type Mirror struct {
	// URL is the archive root (the directory holding dists/ and pool/).
	URL string
	Get Getter
	// CacheDir holds every verified file fetched, as sha256/<hex>; ""
	// caches nothing (files go to a temp dir the caller removes).
	CacheDir string
	// Now is the time expiry is judged at; nil is time.Now.
	Now func() time.Time
	// NotBefore refuses a Release dated before it: the Date of the lock a
	// build replaces, so that a mirror cannot roll a build back to older
	// (signed, but superseded) indexes. Zero checks nothing.
	NotBefore time.Time
	// MaxAge bounds the age of a Release that sets no Valid-Until; 0 is
	// DefaultMaxReleaseAge.
	MaxAge time.Duration
}

// maxInRelease bounds the signed Release file (Debian's is about 150 KB).
const maxInRelease = 16 << 20

func (m *Mirror) url(rel string) string { return strings.TrimRight(m.URL, "/") + "/" + rel }

func (m *Mirror) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Release fetches dists/<suite>/InRelease and verifies it against
// keyring. The returned digest is the SHA-256 of the InRelease bytes.
func (m *Mirror) Release(ctx context.Context, suite string, keyring openpgp.EntityList) (*Release, string, error) {
	u := m.url("dists/" + suite + "/InRelease")
	body, err := m.Get(ctx, u, maxInRelease)
	if err != nil {
		return nil, "", fmt.Errorf("fetch %s: %w", u, err)
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, "", fmt.Errorf("fetch %s: %w", u, err)
	}
	r, err := VerifyInRelease(u, data, keyring, m.now())
	if err != nil {
		return nil, "", err
	}
	if err := r.check(u, suite, m.NotBefore, m.now(), m.MaxAge); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return r, hex.EncodeToString(sum[:]), nil
}

// Index fetches and parses the Packages index of component for arch that
// r signs: the compressed file is checked against its signed hash, and the
// uncompressed stream against the uncompressed file's, when r lists it.
func (m *Mirror) Index(ctx context.Context, suite string, r *Release, component, arch string) ([]*Package, error) {
	base := component + "/binary-" + arch + "/Packages"
	plain, hasPlain := r.Files[base]
	for _, ext := range []string{".gz", ".xz", ""} {
		sum, ok := r.Files[base+ext]
		if !ok {
			continue
		}
		rel := "dists/" + suite + "/" + base + ext
		p, err := m.Fetch(ctx, rel, sum)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rd, err := decompressor(ext, bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.url(rel), err)
		}
		h := sha256.New()
		var src io.Reader = rd
		if hasPlain && ext != "" {
			src = io.TeeReader(rd, h)
		}
		pkgs, err := ReadIndex(m.url(rel), component, arch, src)
		if err != nil {
			return nil, err
		}
		if hasPlain && ext != "" {
			if _, err := io.Copy(h, rd); err != nil {
				return nil, fmt.Errorf("%s: %w", m.url(rel), err)
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != plain.SHA256 {
				return nil, &HashError{What: m.url(rel) + " (uncompressed)", Got: got, Want: plain.SHA256}
			}
		}
		return pkgs, nil
	}
	return nil, fmt.Errorf("%s: the signed Release lists no %s(.gz|.xz): is %s/%s a component of the suite (it has %s)?",
		m.url("dists/"+suite+"/InRelease"), base, component, arch, strings.Join(r.Components, ", "))
}

func decompressor(ext string, r io.Reader) (io.Reader, error) {
	switch ext {
	case ".gz":
		return gzip.NewReader(r)
	case ".xz":
		return xz.NewReader(r)
	}
	return r, nil
}

// HashError is a fetched file whose SHA-256 or size is not what the
// signed index says. What names the file (its URL).
type HashError struct {
	What      string
	Got, Want string
}

func (e *HashError) Error() string {
	return fmt.Sprintf("%s: sha256 %s, the signed index says %s", e.What, e.Got, e.Want)
}

// Fetch returns the path of a verified copy of the mirror file rel whose
// signed SHA-256 and size are sum: from the cache when it holds one that
// still hashes right, else downloaded (hashed while it streams, never
// more than sum.Size bytes read) and cached. A mismatch is a *HashError
// naming the URL, and nothing is cached.
func (m *Mirror) Fetch(ctx context.Context, rel string, sum FileSum) (string, error) {
	if err := validPoolPath(rel); err != nil {
		return "", err
	}
	dir := m.CacheDir
	if dir == "" {
		return "", errors.New("mirror: no cache dir")
	}
	cached := filepath.Join(dir, "sha256", sum.SHA256)
	if ok, err := verifyFile(cached, sum); err != nil {
		return "", err
	} else if ok {
		return cached, nil
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", err
	}
	u := m.url(rel)
	body, err := m.Get(ctx, u, sum.Size)
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", u, err)
	}
	defer body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(cached), ".fetch-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(body, sum.Size+1))
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", u, err)
	}
	if n != sum.Size {
		return "", fmt.Errorf("%s: %d bytes, the signed index says %d", u, n, sum.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum.SHA256 {
		return "", &HashError{What: u, Got: got, Want: sum.SHA256}
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	return cached, os.Rename(tmp.Name(), cached)
}

// verifyFile reports whether p exists with the size and SHA-256 of sum.
// A cached file that no longer hashes right is removed, to be fetched
// again.
func verifyFile(p string, sum FileSum) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return false, err
	}
	if n == sum.Size && hex.EncodeToString(h.Sum(nil)) == sum.SHA256 {
		return true, nil
	}
	f.Close()
	return false, os.Remove(p)
}

// PoolPath is the mirror-relative path of a package file, checked.
func PoolPath(p *Package) (string, error) {
	if err := validPoolPath(p.Filename); err != nil {
		return "", err
	}
	return path.Clean(p.Filename), nil
}

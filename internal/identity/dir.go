package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// The identity dir is what the kubelet's plugin reads inside the machine,
// where the host's config, certificate files and trust store are not: the
// identity resolved from the config (secrets included, so the dir is 0700
// and its files 0600), the host's trusted roots for a service principal's
// authority, and the token cache the plugin shares with the host.
const (
	specFile  = "identity.json"
	rootsFile = "roots.pem"
	tokensDir = "tokens"
)

// DirCache is the token cache of identity dir dir.
func DirCache(dir string) *Cache { return &Cache{Dir: filepath.Join(dir, tokensDir)} }

// SaveDir writes s into identity dir dir (a path this process opens),
// each file atomically and only when it changes.
func SaveDir(dir string, s Spec) (changed bool, err error) {
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	c1, err := fsutil.WriteJSON(filepath.Join(dir, specFile), s)
	if err != nil {
		return false, err
	}
	roots := filepath.Join(dir, rootsFile)
	var c2 bool
	if len(s.RootCAs) > 0 {
		c2, err = fsutil.WriteFile(roots, s.RootCAs, 0o600)
	} else {
		c2, err = fsutil.RemoveIfExists(roots)
	}
	return c1 || c2, err
}

// LoadDir reads the identity in identity dir dir.
func LoadDir(dir string) (Spec, error) {
	var s Spec
	p := filepath.Join(dir, specFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return s, fmt.Errorf("identity: %w (start writes it; run start again)", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("identity: %s: %w", p, err)
	}
	if s.RootCAs, err = os.ReadFile(filepath.Join(dir, rootsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("identity: %w", err)
	}
	return s, nil
}

// trustFiles are where distributions keep their bundle of trusted roots,
// in the order Go's crypto/x509 looks for one.
var trustFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// HostRoots reads the trusted roots of the host at root: the bundle Go
// would load there. It returns nil when the host has none of them.
func HostRoots(root string) ([]byte, error) {
	for _, f := range trustFiles {
		p, err := fsroot.Resolve(root, f)
		if err != nil {
			continue
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the host's trusted roots %s: %w", f, err)
		}
		return data, nil
	}
	return nil, nil
}

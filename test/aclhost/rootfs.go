package aclhost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/Azure/aks-flex-node/test/buildcache"
)

// RootfsVersion is part of the cache key. Bump it when what this package
// derives from the built tree (the ACL layer, the layout of a cache entry)
// changes, so that stale caches are rebuilt instead of reused.
const RootfsVersion = "aclhost-v1"

// Rootfs is the Debian tree both variants boot: a minimal systemd host. The
// ACL specifics (os-release, no package manager, read-only /usr) are layered
// on per variant, so one build serves both. It is part of the cache key.
var Rootfs = buildcache.Rootfs{
	Packages: []string{
		"systemd", "systemd-sysv", "dbus", "systemd-container",
		"iproute2", "util-linux", "mount", "kmod", "procps",
		"iptables", "nftables", "ca-certificates", "curl", "coreutils",
	},
	// It would clean /tmp and /var/tmp while a test compares trees.
	Mask: []string{"systemd-tmpfiles-clean.timer"},
}

// EnvArtifacts names the directory failing tests dump journals to; EnvE2E
// must be "1" for tests that boot hosts to run.
const (
	EnvArtifacts = "AKS_FLEX_NODE_TEST_ARTIFACTS"
	EnvE2E       = "AKS_FLEX_NODE_E2E"
)

// CacheKey is the content key of the rootfs this package builds.
func CacheKey() string {
	return Rootfs.AddTo(buildcache.NewKey().Add("version", RootfsVersion)).Sum()
}

// cacheEntry is one built rootfs in the cache:
//
//	<cache>/rootfs-<key>/rootfs     the debootstrapped tree (shared lower layer)
//	<cache>/rootfs-<key>/acl        the ACL layer stacked above it
//	<cache>/rootfs-<key>/build.log  output of the build
type cacheEntry struct{ buildcache.Entry }

func (c cacheEntry) Rootfs() string   { return c.Path("rootfs") }
func (c cacheEntry) ACLLayer() string { return c.Path("acl") }

// lowers returns the overlay lower layers for v, top first.
func (c cacheEntry) lowers(v Variant) []string {
	if v == ACL {
		return []string{c.ACLLayer(), c.Rootfs()}
	}
	return []string{c.Rootfs()}
}

// EnsureRootfs returns the cached Debian rootfs, building it first if the
// cache has no complete entry for CacheKey. Concurrent callers (parallel
// test binaries) serialise on a lock file; the loser waits and reuses.
func EnsureRootfs(ctx context.Context) (string, error) {
	c, _, err := ensureCache(ctx, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "aclhost: "+format+"\n", args...)
	})
	if err != nil {
		return "", err
	}
	return c.Rootfs(), nil
}

// ensureCache returns the cache entry and how long a build took (0 when the
// cache was warm).
func ensureCache(ctx context.Context, logf buildcache.Logf) (cacheEntry, time.Duration, error) {
	start := time.Now()
	e, built, err := buildcache.Ensure(ctx, logf, buildcache.Dir(), "rootfs-"+CacheKey(), func(dir string) error {
		c := cacheEntry{buildcache.Entry{Dir: dir}}
		logf.Printf("building rootfs %s (cold cache, takes a few minutes); log: %s", dir, c.Path("build.log"))
		if err := Rootfs.Debootstrap(ctx, logf, c.Rootfs(), c.Path("build.log")); err != nil {
			return err
		}
		if err := buildACLLayer(c); err != nil {
			return fmt.Errorf("build rootfs: ACL layer: %w", err)
		}
		return nil
	})
	if err != nil {
		return cacheEntry{}, 0, fmt.Errorf("rootfs: %w", err)
	}
	if !built {
		return cacheEntry{e}, 0, nil
	}
	d := time.Since(start)
	logf.Printf("rootfs built in %s", d.Round(time.Second))
	return cacheEntry{e}, d, nil
}

// ACLOSRelease is the os-release of the ACL variant, written to both
// /etc/os-release and /usr/lib/os-release.
const ACLOSRelease = `NAME="Azure Container Linux"
VERSION="3.0.20250520"
ID=azurelinux
ID_LIKE="flatcar"
VERSION_ID=3.0
VARIANT="Azure Container Linux"
VARIANT_ID=azurecontainerlinux
PRETTY_NAME="Azure Container Linux 3.0 (test host)"
ANSI_COLOR="1;34"
HOME_URL="https://aka.ms/azurelinux"
`

// aclRemoved are the paths (globs, relative to the rootfs) the ACL layer
// hides with overlay whiteouts: the package manager and its state. ACL has
// none, so a test host that still had apt would let code that wrongly
// assumes one pass.
var aclRemoved = []string{
	"usr/bin/apt*", "usr/bin/dpkg*", "usr/sbin/dpkg*", "usr/bin/debconf*",
	"usr/lib/apt", "usr/lib/dpkg", "usr/share/dpkg", "usr/libexec/dpkg",
	"usr/lib/systemd/system/apt-daily*", "usr/lib/systemd/system/dpkg-db-backup*",
	"etc/apt", "etc/dpkg", "etc/cron.daily/apt-compat", "etc/cron.daily/dpkg",
	"var/lib/apt", "var/lib/dpkg", "var/cache/apt", "var/log/apt",
}

// buildACLLayer writes the layer stacked between the Debian rootfs and each
// ACL host's upper dir: the ACL os-release and whiteouts (0:0 character
// devices, which overlayfs honours in lower layers too) for aclRemoved.
func buildACLLayer(c cacheEntry) error {
	layer := c.ACLLayer()
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		dst := filepath.Join(layer, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(ACLOSRelease), 0o644); err != nil {
			return err
		}
	}
	for _, pattern := range aclRemoved {
		if err := whiteOut(c.Rootfs(), layer, pattern); err != nil {
			return err
		}
	}
	// Directories created above must carry the modes of the tree below, or
	// overlayfs would present e.g. /usr/bin with 0755 root-only defaults.
	return filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(layer, p)
		st, err := os.Stat(filepath.Join(c.Rootfs(), rel))
		if err != nil {
			return nil
		}
		return os.Chmod(p, st.Mode().Perm())
	})
}

// whiteOut puts a whiteout into layer for every path of rootfs that
// pattern matches.
func whiteOut(rootfs, layer, pattern string) error {
	matches, err := filepath.Glob(filepath.Join(rootfs, pattern))
	if err != nil {
		return err
	}
	for _, m := range matches {
		rel, err := filepath.Rel(rootfs, m)
		if err != nil {
			return err
		}
		dst := filepath.Join(layer, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := syscall.Mknod(dst, syscall.S_IFCHR|0o000, 0); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("whiteout %s: %w", dst, err)
		}
	}
	return nil
}

package aclhost

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildScript is build-rootfs.sh; embedding it means the cache key and the
// build always use the script this package was compiled with, wherever the
// test binary runs from.
//
//go:embed build-rootfs.sh
var buildScript []byte

// RootfsVersion is part of the cache key. Bump it when what this package
// derives from the built tree (the ACL layer, the layout of a cache entry)
// changes, so that stale caches are rebuilt instead of reused.
const RootfsVersion = "aclhost-v1"

// Packages are the Debian packages build-rootfs.sh installs on top of
// debootstrap's minbase. They are part of the cache key.
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "systemd-container",
	"iproute2", "util-linux", "mount", "kmod", "procps",
	"iptables", "nftables", "ca-certificates", "curl", "coreutils",
}

// EnvCache names the cache directory; EnvArtifacts the directory failing
// tests dump journals to; EnvE2E must be "1" for tests that boot hosts to run.
const (
	EnvCache     = "AKS_FLEX_NODE_TEST_CACHE"
	EnvArtifacts = "AKS_FLEX_NODE_TEST_ARTIFACTS"
	EnvE2E       = "AKS_FLEX_NODE_E2E"
)

// DefaultCacheDir is used when EnvCache is unset.
const DefaultCacheDir = "/var/cache/aks-flex-node-test"

// CacheDir returns the directory the built root file systems are cached in.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return DefaultCacheDir
}

// CacheKey is the content key of the rootfs this package builds.
func CacheKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "version=%s\n", RootfsVersion)
	fmt.Fprintf(h, "packages=%s\n", strings.Join(Packages, ","))
	h.Write(buildScript)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// cacheEntry is one built rootfs in the cache:
//
//	<cache>/rootfs-<key>/rootfs     the debootstrapped tree (shared lower layer)
//	<cache>/rootfs-<key>/acl        the ACL layer stacked above it
//	<cache>/rootfs-<key>/build.log  output of the build
//	<cache>/rootfs-<key>/complete   written last; absent means rebuild
type cacheEntry struct {
	Dir string
}

func (c cacheEntry) Rootfs() string   { return filepath.Join(c.Dir, "rootfs") }
func (c cacheEntry) ACLLayer() string { return filepath.Join(c.Dir, "acl") }
func (c cacheEntry) marker() string   { return filepath.Join(c.Dir, "complete") }

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
func ensureCache(ctx context.Context, logf func(string, ...any)) (cacheEntry, time.Duration, error) {
	base := CacheDir()
	c := cacheEntry{Dir: filepath.Join(base, "rootfs-"+CacheKey())}
	if _, err := os.Stat(c.marker()); err == nil {
		return c, 0, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return c, 0, fmt.Errorf("rootfs cache: %w", err)
	}
	lock, err := os.OpenFile(c.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return c, 0, fmt.Errorf("rootfs cache: %w", err)
	}
	defer lock.Close()
	if err := flockContext(ctx, lock, logf); err != nil {
		return c, 0, fmt.Errorf("rootfs cache: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it anyway

	if _, err := os.Stat(c.marker()); err == nil {
		return c, 0, nil // built by whoever held the lock
	}
	start := time.Now()
	logf("building rootfs %s (cold cache, takes a few minutes); log: %s", c.Dir, filepath.Join(c.Dir, "build.log"))
	if err := build(ctx, c, logf); err != nil {
		return c, 0, err
	}
	d := time.Since(start)
	logf("rootfs built in %s", d.Round(time.Second))
	return c, d, nil
}

func flockContext(ctx context.Context, f *os.File, logf func(string, ...any)) error {
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if !logged {
			logf("waiting for another build of %s", f.Name())
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func build(ctx context.Context, c cacheEntry, logf func(string, ...any)) error {
	// Whatever is there is the remains of an interrupted build.
	if err := removeAllSafe(c.Dir); err != nil {
		return fmt.Errorf("rootfs cache: clean partial build: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	script := filepath.Join(c.Dir, "build-rootfs.sh")
	if err := os.WriteFile(script, buildScript, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(c.Dir, "build.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()

	cmd := exec.CommandContext(ctx, "/bin/bash", script, c.Rootfs())
	cmd.Env = append(os.Environ(), "ACLHOST_PACKAGES="+strings.Join(Packages, ","))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	progress := make(chan struct{})
	go func() {
		defer close(progress)
		copyWithProgress(logFile, pr, logf)
	}()
	err = cmd.Run()
	pw.Close()
	<-progress
	if err != nil {
		tail, _ := tailFile(logFile.Name(), 30)
		return fmt.Errorf("build rootfs: %s: %w\n%s", script, err, tail)
	}
	if err := buildACLLayer(c); err != nil {
		return fmt.Errorf("build rootfs: ACL layer: %w", err)
	}
	if err := os.WriteFile(c.marker(), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	return syncDir(c.Dir)
}

// copyWithProgress copies the build output to the log and reports the
// debootstrap stage lines, roughly one a few seconds, so a cold build does
// not look hung.
func copyWithProgress(w io.Writer, r io.Reader, logf func(string, ...any)) {
	buf := make([]byte, 32*1024)
	var line []byte
	last := time.Time{}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n]) //nolint:errcheck // best effort log
			for _, b := range buf[:n] {
				if b != '\n' {
					line = append(line, b)
					continue
				}
				s := string(line)
				line = line[:0]
				if strings.HasPrefix(s, "build-rootfs:") || time.Since(last) > 15*time.Second {
					logf("  %s", s)
					last = time.Now()
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func tailFile(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
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
		matches, err := filepath.Glob(filepath.Join(c.Rootfs(), pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			rel, err := filepath.Rel(c.Rootfs(), m)
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

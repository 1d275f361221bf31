// Package buildcache owns what the slow test fixtures have in common: one
// cache directory whose entries are named by a hash of their inputs, built
// once under a lock and then reused by every test binary; the one
// debootstrap script the Debian root file systems of test/aclhost and
// test/fixtures are built with; and the mount-aware removal such builds need.
//
// An entry is
//
//	<cache>/<name>/           the entry, filled by its build function
//	<cache>/<name>/complete   written last; absent means rebuild
//	<cache>/<name>.lock       flock'd while building, so concurrent test
//	                          binaries build once and share
//
// where <name> ends in the hash of everything the entry is derived from, so
// a changed input builds a new entry and a warm cache is reused as is.
package buildcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// EnvCache overrides DefaultDir.
const EnvCache = "AKS_FLEX_NODE_TEST_CACHE"

// DefaultDir is the cache directory when EnvCache is unset; test/e2e/build-k8s.sh
// keeps the Kubernetes binaries there too.
const DefaultDir = "/var/cache/aks-flex-node-test"

// Dir returns the cache directory.
func Dir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return DefaultDir
}

// Logf receives progress lines; nil discards them.
type Logf func(format string, args ...any)

// Printf calls l unless it is nil.
func (l Logf) Printf(format string, args ...any) {
	if l != nil {
		l(format, args...)
	}
}

// Key collects the inputs of an entry; Sum names it.
type Key struct{ h hash.Hash }

// NewKey starts an empty key.
func NewKey() *Key { return &Key{h: sha256.New()} }

// Add records one named input. Names keep two inputs that happen to
// concatenate to the same bytes from colliding.
func (k *Key) Add(name, value string) *Key {
	fmt.Fprintf(k.h, "%s=%q\n", name, value)
	return k
}

// Sum is the key: 16 hex digits of the SHA-256 of the inputs so far.
func (k *Key) Sum() string { return hex.EncodeToString(k.h.Sum(nil))[:16] }

// Entry is one cache directory.
type Entry struct {
	Dir string
}

// Path joins elem to the entry's directory.
func (e Entry) Path(elem ...string) string { return filepath.Join(append([]string{e.Dir}, elem...)...) }

func (e Entry) marker() string { return filepath.Join(e.Dir, "complete") }

// Complete reports whether the entry was fully built.
func (e Entry) Complete() bool {
	_, err := os.Stat(e.marker())
	return err == nil
}

// Ensure returns the entry <base>/<name>, running build on a clean, empty
// directory unless a complete entry exists; built reports whether this call
// did the build. Concurrent callers (parallel test binaries) serialise on
// <base>/<name>.lock; the loser waits and reuses what the winner built. A
// failed or interrupted build leaves no complete marker, so the next call
// starts over.
func Ensure(ctx context.Context, logf Logf, base, name string, build func(dir string) error) (e Entry, built bool, err error) {
	e = Entry{Dir: filepath.Join(base, name)}
	if e.Complete() {
		return e, false, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return e, false, fmt.Errorf("build cache: %w", err)
	}
	lock, err := os.OpenFile(e.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return e, false, fmt.Errorf("build cache: %w", err)
	}
	defer lock.Close()
	if err := flockContext(ctx, lock, logf); err != nil {
		return e, false, fmt.Errorf("build cache: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it anyway

	if e.Complete() {
		return e, false, nil // built by whoever held the lock
	}
	// Whatever is there is the remains of an interrupted build.
	if err := RemoveAllSafe(e.Dir); err != nil {
		return e, false, fmt.Errorf("build cache: clean partial build: %w", err)
	}
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return e, false, fmt.Errorf("build cache: %w", err)
	}
	if err := build(e.Dir); err != nil {
		return e, false, err
	}
	if err := syncTree(e.Dir); err != nil {
		return e, false, fmt.Errorf("build cache: sync %s: %w", e.Dir, err)
	}
	if err := os.WriteFile(e.marker(), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return e, false, fmt.Errorf("build cache: %w", err)
	}
	return e, true, syncDir(e.Dir)
}

// flockContext takes an exclusive lock on f, polling so that ctx can end
// the wait; it says once that it is waiting.
func flockContext(ctx context.Context, f *os.File, logf Logf) error {
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
			logf.Printf("waiting for another build holding %s", f.Name())
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// syncTree fsyncs every regular file and directory below dir, so that the
// complete marker never survives a crash that the content did not.
func syncTree(dir string) error {
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

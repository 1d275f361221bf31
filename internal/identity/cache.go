package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/renameio/v2"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Token is an access token and when it stops being valid.
type Token struct {
	AccessToken string    `json:"accessToken"`
	ExpiresOn   time.Time `json:"expiresOn"`
	ObtainedAt  time.Time `json:"obtainedAt"`
}

// MaxRefreshAhead is how long before expiry a token is replaced at most:
// Entra tokens live an hour or more, and five minutes leaves room for a
// slow endpoint. A short-lived token is replaced at half its life.
const MaxRefreshAhead = 5 * time.Minute

// RefreshAt is when t should be replaced: MaxRefreshAhead before it
// expires, or half-way through a life shorter than twice that.
func (t Token) RefreshAt() time.Time {
	ahead := MaxRefreshAhead
	if life := t.ExpiresOn.Sub(t.ObtainedAt); life > 0 && life/2 < ahead {
		ahead = life / 2
	}
	return t.ExpiresOn.Add(-ahead)
}

// Cache keeps tokens in files of their own in Dir (mode 0700), one per
// identity and resource, each written atomically with mode 0600. Every
// process that asks for the same identity shares them: the kubelet's
// plugin, the agent, `token kubelogin` run by hand.
type Cache struct {
	Dir string
}

// Key names the cache entry of s's token for resource. It covers the
// credential itself (hashed), so a rotated secret or certificate never
// gets the old identity's token.
func Key(s Spec, resource string) string {
	h := sha256.New()
	for _, v := range []string{s.Method, s.TenantID, s.ClientID, s.AuthorityHost, s.ClientSecret, string(s.Certificate), resource} {
		fmt.Fprintf(h, "%d:%s\n", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (c Cache) path(key string) string { return filepath.Join(c.Dir, key+".json") }

// The cache dir is in the identity dir the machine's plugin shares, so
// the machine can put anything there: a link to another host directory,
// a named pipe, a lock it never releases. Every entry is opened through
// an os.Root of the cache dir (which must itself be a directory, not a
// link), without following a link, without blocking, regular files
// only, and the lock is waited for until the caller's deadline at most.

// maxLockWait bounds the wait for the lock of a caller without a
// deadline; a fetch under the lock is bounded well within it.
const maxLockWait = time.Minute

// maxEntry bounds a cache entry read (a token is a few KB).
const maxEntry = 1 << 20

// openDir opens the cache dir as an os.Root: its parent is opened as a
// root, and the dir in it must be a directory, not a link (created 0700
// when create and absent).
func (c Cache) openDir(create bool) (*os.Root, error) {
	parentDir, name := filepath.Dir(c.Dir), filepath.Base(c.Dir)
	if create {
		if err := fsutil.MkdirAll(parentDir, 0o700); err != nil {
			return nil, err
		}
	}
	parent, err := os.OpenRoot(parentDir)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	fi, err := parent.Lstat(name)
	if create && errors.Is(err, fs.ErrNotExist) {
		if err := parent.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		fi, err = parent.Lstat(name)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%s): remove it; the agent makes it again", c.Dir, fi.Mode().Type())
	}
	return parent.OpenRoot(name)
}

// openEntry opens name in r without following a link and without
// blocking on a pipe, and refuses anything but a regular file. os.Root
// follows a link that stays inside it, whatever the flags, so the entry
// is looked at first (Lstat) and what was opened must be that file.
func openEntry(r *os.Root, dir, name string, flag int) (*os.File, error) {
	shown := filepath.Join(dir, name)
	for attempt := 0; ; attempt++ {
		fi, err := r.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) && flag&os.O_CREATE != 0 {
			f, err := r.OpenFile(name, flag|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
			if errors.Is(err, fs.ErrExist) && attempt == 0 {
				continue // made by another process meanwhile: look again
			}
			return f, err
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a link: remove it", shown)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file (%s): remove it", shown, fi.Mode().Type())
		}
		f, err := r.OpenFile(name, flag&^os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		opened, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if !os.SameFile(fi, opened) || !opened.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%s changed while it was opened: is another process replacing it?", shown)
		}
		return f, nil
	}
}

// Load returns the cached token for key; ok is false when there is none
// or it cannot be read (the caller then fetches a new one).
func (c Cache) Load(key string) (t Token, ok bool) {
	r, err := c.openDir(false)
	if err != nil {
		return Token{}, false
	}
	defer r.Close()
	f, err := openEntry(r, c.Dir, key+".json", os.O_RDONLY)
	if err != nil {
		return Token{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEntry))
	if err != nil || json.Unmarshal(data, &t) != nil || t.AccessToken == "" {
		return Token{}, false
	}
	return t, true
}

// Store writes t as key's entry, atomically, 0600, inside the cache dir
// (renaming over a link or a pipe replaces it, never what it points to).
func (c Cache) Store(key string, t Token) error {
	r, err := c.openDir(true)
	if err != nil {
		return fmt.Errorf("token cache %s: %w", c.Dir, err)
	}
	defer r.Close()
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	pf, err := renameio.NewPendingFile(key+".json", renameio.WithRoot(r), renameio.WithPermissions(0o600), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return fmt.Errorf("token cache: write %s: %w", c.path(key), err)
	}
	defer func() { _ = pf.Cleanup() }()
	if _, err := pf.Write(data); err != nil {
		return fmt.Errorf("token cache: write %s: %w", c.path(key), err)
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("token cache: write %s: %w", c.path(key), err)
	}
	return nil
}

// lock takes key's lock (flock on a file beside the entry) so that
// processes that find the token stale together fetch it once. unlock
// releases it. A lock that cannot be made for want of permission (a
// read-only dir) is no lock, which only costs a second fetch; anything
// the machine could have planted (a link, a pipe, a lock held past ctx's
// deadline or maxLockWait) is an error.
func (c Cache) lock(ctx context.Context, key string) (unlock func(), err error) {
	noLock := func(err error) (func(), error) {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return func() {}, nil
		}
		return nil, fmt.Errorf("token cache: lock %s: %w", c.Dir, err)
	}
	r, err := c.openDir(true)
	if err != nil {
		return noLock(err)
	}
	defer r.Close()
	name := "." + key + ".lock"
	f, err := openEntry(r, c.Dir, name, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return noLock(err)
	}
	deadline := time.Now().Add(maxLockWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("token cache: lock %s: %w", filepath.Join(c.Dir, name), err)
		}
		wait := time.NewTimer(min(50*time.Millisecond, time.Until(deadline)))
		select {
		case <-ctx.Done():
			wait.Stop()
			f.Close()
			return nil, fmt.Errorf("token cache: lock %s is held by another process: %w", filepath.Join(c.Dir, name), ctx.Err())
		case <-wait.C:
		}
		if !time.Now().Before(deadline) {
			f.Close()
			return nil, fmt.Errorf("token cache: lock %s is held by another process after %s: %w", filepath.Join(c.Dir, name), maxLockWait, context.DeadlineExceeded)
		}
	}
}

// Clear removes every entry (reset does this with the state dir).
func (c Cache) Clear() error {
	err := os.RemoveAll(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

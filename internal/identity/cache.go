package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

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

// Load returns the cached token for key; ok is false when there is none
// or it cannot be read (the caller then fetches a new one).
func (c Cache) Load(key string) (t Token, ok bool) {
	data, err := os.ReadFile(c.path(key))
	if err != nil || json.Unmarshal(data, &t) != nil || t.AccessToken == "" {
		return Token{}, false
	}
	return t, true
}

// Store writes t as key's entry.
func (c Cache) Store(key string, t Token) error {
	if err := fsutil.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("token cache %s: %w", c.Dir, err)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := fsutil.WriteFile(c.path(key), data, 0o600); err != nil {
		return fmt.Errorf("token cache: write %s: %w", c.path(key), err)
	}
	return nil
}

// lock takes key's lock (flock on a file beside the entry) so that
// processes that find the token stale together fetch it once. unlock
// releases it; a lock that cannot be taken (no cache dir yet, a read-only
// dir) is no lock, which only costs a second fetch.
func (c Cache) lock(key string) (unlock func()) {
	if err := fsutil.MkdirAll(c.Dir, 0o700); err != nil {
		return func() {}
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "."+key+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return func() {}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return func() {}
	}
	return func() { _ = f.Close() }
}

// Clear removes every entry (reset does this with the state dir).
func (c Cache) Clear() error {
	err := os.RemoveAll(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

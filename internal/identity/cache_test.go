package identity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/fakeentra"
)

// hostileCache is a service principal's Source whose cache is the
// tokens dir of a fresh identity dir, as the machine can write it.
func hostileCache(t *testing.T) (src *Source, key, tokens string) {
	t.Helper()
	tn := startTenant(t)
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: "o", Secret: "x-secret-value"})
	s := spSpec(tn, app)
	s.ClientSecret = "x-secret-value"
	tokens = filepath.Join(t.TempDir(), "identity", tokensDir)
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	return &Source{Spec: s, Cache: &Cache{Dir: tokens}}, Key(s, AKSServerID), tokens
}

// tokenWithin runs src.Token under a deadline and fails the test when it
// has not returned a while after it: the agent must never block past its
// deadline on what the machine put in the cache.
func tokenWithin(t *testing.T, src *Source, deadline time.Duration) (Token, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	type result struct {
		tok Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		tok, _, err := src.Token(ctx, AKSServerID)
		done <- result{tok, err}
	}()
	select {
	case r := <-done:
		return r.tok, r.err
	case <-time.After(deadline + 10*time.Second):
		t.Fatalf("Token blocked more than 10 s past its %s deadline", deadline)
		return Token{}, nil
	}
}

// Issue 26 item 7: a named pipe in the cache, at the token's entry or at
// its lock, never blocks the agent; the entry is replaced by a regular
// file, the lock refused with an error naming it.
func TestTokenCacheFIFOIsBounded(t *testing.T) {
	src, key, tokens := hostileCache(t)
	entry := filepath.Join(tokens, key+".json")
	if err := syscall.Mkfifo(entry, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tokenWithin(t, src, 2*time.Second); err != nil {
		t.Fatalf("a FIFO at the entry: %v (it is not a token; fetch and replace it)", err)
	}
	if fi, err := os.Lstat(entry); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the entry after a fetch: %v %v, want a regular 0600 file", fi, err)
	}

	src, key, tokens = hostileCache(t)
	lock := filepath.Join(tokens, "."+key+".lock")
	if err := syscall.Mkfifo(lock, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := tokenWithin(t, src, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), lock) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO at the lock: %v, want an error naming %s", err, lock)
	}
}

// A lock another process holds (the machine can flock the shared file)
// is waited for until the caller's deadline, not for ever.
func TestTokenCacheHeldLockIsBounded(t *testing.T) {
	src, key, tokens := hostileCache(t)
	lock := filepath.Join(tokens, "."+key+".lock")
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tokenWithin(t, src, 500*time.Millisecond)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), lock) {
		t.Errorf("a held lock: %v, want the deadline, naming %s", err, lock)
	}
	t.Logf("gave up after %s", time.Since(start).Round(time.Millisecond))
}

// Links in the cache do not redirect the host's writes: not the tokens
// dir replaced by a link to another host directory, not a link at the
// lock or the entry.
func TestTokenCacheSymlinkIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, tokens, key, elsewhere string)
		fails bool
	}{
		{"tokens dir", func(t *testing.T, tokens, _, elsewhere string) {
			must(t, os.Remove(tokens))
			must(t, os.Symlink(elsewhere, tokens))
		}, true},
		{"lock", func(t *testing.T, tokens, key, elsewhere string) {
			must(t, os.Symlink(filepath.Join(elsewhere, "planted.lock"), filepath.Join(tokens, "."+key+".lock")))
		}, true},
		{"lock, to a file in the dir", func(t *testing.T, tokens, key, _ string) {
			must(t, os.WriteFile(filepath.Join(tokens, "other"), nil, 0o600))
			must(t, os.Symlink("other", filepath.Join(tokens, "."+key+".lock")))
		}, true},
		{"entry", func(t *testing.T, tokens, key, elsewhere string) {
			must(t, os.Symlink(filepath.Join(elsewhere, "planted.json"), filepath.Join(tokens, key+".json")))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, key, tokens := hostileCache(t)
			elsewhere := t.TempDir() // another host directory
			tc.plant(t, tokens, key, elsewhere)
			_, err := tokenWithin(t, src, 2*time.Second)
			if tc.fails && (err == nil || !strings.Contains(err.Error(), tokens)) {
				t.Errorf("a link at the %s: %v, want an error naming %s", tc.name, err, tokens)
			}
			if !tc.fails && err != nil {
				t.Errorf("a link at the entry: %v (it is not a token; fetch and replace the link)", err)
			}
			if entries, _ := os.ReadDir(elsewhere); len(entries) > 0 {
				t.Errorf("the host's other directory got %s", entries[0].Name())
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package deb_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/image/deb"
	"github.com/Azure/aks-flex-node/internal/image/deb/debtest"
)

// Issue 26 item 6: a mirror that serves, at dists/trixie/, an InRelease
// the archive key signed for bookworm in 2023 is refused: the Release
// must name the suite asked for (as Suite or Codename, as apt checks),
// and must not be older than the lock it replaces or than a bounded age
// where it sets no Valid-Until. Each error names what was expected and
// what was found.
func TestInReleaseOfAnotherSuiteOrTooOldIsRefused(t *testing.T) {
	ctx := context.Background()
	key := debtest.NewKey(t, "archive")
	dir := t.TempDir()
	r := debtest.Write(t, dir, "bookworm", key, []debtest.Pkg{{Name: "a", Version: "1", Files: []debtest.File{{Path: "/a", Body: "a"}}}})
	r.Date = time.Date(2023, 6, 10, 9, 0, 0, 0, time.UTC)
	r.Sign(t, key)
	// The mirror puts bookworm's signed files where trixie's belong.
	if err := os.Rename(filepath.Join(dir, "dists", "bookworm"), filepath.Join(dir, "dists", "trixie")); err != nil {
		t.Fatal(err)
	}
	ks, err := deb.LoadKeyring(debtest.WriteKeyring(t, t.TempDir(), key))
	if err != nil {
		t.Fatal(err)
	}
	url := debtest.Serve(t, dir)
	// The key is made now, so the clock cannot go back to 2023; a MaxAge
	// of a century keeps the suite, not the age, the reason here.
	const century = 100 * 365 * 24 * time.Hour
	m := &deb.Mirror{URL: url, Get: get, CacheDir: t.TempDir(), MaxAge: century}
	_, _, err = m.Release(ctx, "trixie", ks)
	if err == nil {
		t.Fatal("an InRelease signed for bookworm was accepted for trixie")
	}
	for _, want := range []string{"trixie", "Suite", "bookworm", url + "/dists/trixie/InRelease"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	// Served at its own name, the same Release is judged by its Date.
	if err := os.Rename(filepath.Join(dir, "dists", "trixie"), filepath.Join(dir, "dists", "bookworm")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Release(ctx, "bookworm", ks); err != nil {
		t.Fatalf("bookworm's own Release within MaxAge: %v", err)
	}
	lockDate := time.Date(2025, 5, 10, 9, 0, 0, 0, time.UTC)
	older := &deb.Mirror{URL: url, Get: get, CacheDir: t.TempDir(), MaxAge: century, NotBefore: lockDate}
	if _, _, err := older.Release(ctx, "bookworm", ks); err == nil || !strings.Contains(err.Error(), "2023-06-10") || !strings.Contains(err.Error(), "2025-05-10") {
		t.Errorf("a Release older than the lock's Date: %v", err)
	}
	// Without Valid-Until, the default bound (DefaultMaxReleaseAge, at
	// most two years) refuses a Release from 2023 at any time since 2025.
	stale := &deb.Mirror{URL: url, Get: get, CacheDir: t.TempDir()}
	if _, _, err := stale.Release(ctx, "bookworm", ks); err == nil || !strings.Contains(err.Error(), "2023-06-10") || !strings.Contains(err.Error(), "Valid-Until") {
		t.Errorf("a Release from 2023 without Valid-Until, under the default bound: %v", err)
	}
}

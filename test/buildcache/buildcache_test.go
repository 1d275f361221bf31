package buildcache

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func TestKey(t *testing.T) {
	a := NewKey().Add("x", "1").Add("y", "2").Sum()
	if len(a) != 16 || a != NewKey().Add("x", "1").Add("y", "2").Sum() {
		t.Fatalf("key %q is not stable", a)
	}
	for _, other := range []string{
		NewKey().Add("x", "1").Add("y", "3").Sum(),
		NewKey().Add("x", "12").Add("y", "").Sum(),
		NewKey().Add("x", "1").Sum(),
	} {
		if other == a {
			t.Errorf("different inputs, same key %s", a)
		}
	}
	r := Rootfs{Packages: []string{"systemd"}}
	k := r.AddTo(NewKey()).Sum()
	for _, changed := range []Rootfs{
		{Packages: []string{"systemd", "dbus"}},
		{Packages: []string{"systemd"}, Mask: []string{"getty.target"}},
		{Packages: []string{"systemd"}, Suite: "trixie"},
	} {
		if changed.AddTo(NewKey()).Sum() == k {
			t.Errorf("Rootfs key ignores a change: %+v", changed)
		}
	}
	if (Rootfs{Packages: []string{"systemd"}, Suite: "bookworm"}).AddTo(NewKey()).Sum() != k {
		t.Errorf("the default suite and an explicit bookworm give different keys")
	}
}

func TestEnsure(t *testing.T) {
	base := t.TempDir()
	ctx := context.Background()
	var builds atomic.Int32
	build := func(dir string) error {
		builds.Add(1)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("build got a non-empty %s", dir)
		}
		return os.WriteFile(filepath.Join(dir, "out"), []byte("built"), 0o644)
	}

	// A failed build leaves a partial directory and no marker; the next
	// call cleans it up and builds again.
	_, built, err := Ensure(ctx, t.Logf, base, "e-1", func(dir string) error {
		_ = os.WriteFile(filepath.Join(dir, "partial"), nil, 0o644)
		return errors.New("boom")
	})
	if err == nil || built {
		t.Fatalf("failed build: built=%v err=%v", built, err)
	}
	if _, err := os.Stat(filepath.Join(base, "e-1", "complete")); err == nil {
		t.Fatal("a failed build left a complete marker")
	}

	// Concurrent callers (each with its own lock file description, like
	// separate test binaries) build once.
	var wg sync.WaitGroup
	results := make([]bool, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, built, err := Ensure(ctx, nil, base, "e-1", build)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = built
			if b, err := os.ReadFile(e.Path("out")); err != nil || string(b) != "built" {
				t.Errorf("entry content %q, %v", b, err)
			}
			if _, err := os.Stat(e.Path("partial")); err == nil {
				t.Error("the partial build's file survived")
			}
		}()
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds for one entry, want 1", n)
	}
	n := 0
	for _, b := range results {
		if b {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d callers report built, want 1", n)
	}
	if e, built, err := Ensure(ctx, nil, base, "e-1", build); err != nil || built || !e.Complete() {
		t.Errorf("warm Ensure: built=%v complete=%v err=%v", built, e.Complete(), err)
	}
}

func TestEnsureHonoursContext(t *testing.T) {
	base := t.TempDir()
	lock, err := os.OpenFile(filepath.Join(base, "e.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = Ensure(ctx, nil, base, "e", func(string) error { t.Error("built while another holds the lock"); return nil })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "e.lock") {
		t.Errorf("err = %v, want context.Canceled naming the lock", err)
	}
}

func TestRemoveAllSafeUnmountsFirst(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "partial")
	mnt := filepath.Join(dir, "rootfs/proc")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAllSafe(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := RemoveAllSafe("/"); err == nil {
		t.Error("RemoveAllSafe(/) did not refuse")
	}
}

// TestMirrorFromAptSources runs build-rootfs.sh --print-mirror against apt
// configurations in a temp dir (APT_CONFIG): the mirror comes from apt's
// own reading of the sources, for the suite asked, and without a source the
// script fails naming the files it looked in.
func TestMirrorFromAptSources(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get not found: mirror detection reads apt's configuration")
	}
	script := filepath.Join(t.TempDir(), "build-rootfs.sh")
	if err := os.WriteFile(script, rootfsScript, 0o755); err != nil {
		t.Fatal(err)
	}
	const deb822 = `Types: deb
URIs: http://security.test/debian
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://mirror-src.test/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://mirror-off.test/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://mirror-a.test/debian/
Suites: bookworm bookworm-updates
Components: main contrib
`
	for _, tc := range []struct {
		name, list, sources, suite, want, wantErr string
	}{
		{name: "deb822", sources: deb822, want: "http://mirror-a.test/debian"},
		{name: "one-line", list: "deb http://mirror-b.test/debian trixie main\ndeb [arch=amd64] http://mirror-c.test/debian/ bookworm main\n", want: "http://mirror-c.test/debian"},
		{name: "other suite", sources: deb822, suite: "bookworm-updates", want: "http://mirror-a.test/debian"},
		{name: "none for the suite", list: "deb http://mirror-b.test/debian trixie main\n", sources: deb822, suite: "sid", wantErr: "no apt source for suite sid"},
		{name: "no sources", wantErr: "no apt source for suite bookworm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			etc := filepath.Join(dir, "etc")
			for _, d := range []string{etc + "/sources.list.d", etc + "/apt.conf.d", dir + "/lists/partial"} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.list != "" {
				if err := os.WriteFile(etc+"/sources.list", []byte(tc.list), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.sources != "" {
				if err := os.WriteFile(etc+"/sources.list.d/test.sources", []byte(tc.sources), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			conf := filepath.Join(dir, "apt.conf")
			if err := os.WriteFile(conf, []byte(`Dir::Etc "`+etc+`";`+"\n"+`Dir::State::lists "`+dir+`/lists";`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/bash", script, "--print-mirror")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "APT_CONFIG=" + conf}
			if tc.suite != "" {
				cmd.Env = append(cmd.Env, "ROOTFS_SUITE="+tc.suite)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tc.wantErr != "" {
				msg := stderr.String()
				if err == nil || !strings.Contains(msg, tc.wantErr) || !strings.Contains(msg, etc+"/sources.list,") ||
					!strings.Contains(msg, etc+"/sources.list.d/*.list") || !strings.Contains(msg, etc+"/sources.list.d/*.sources") {
					t.Errorf("want a failure saying %q and naming the files under %s; err=%v stdout=%q stderr=%q", tc.wantErr, etc, err, stdout.String(), msg)
				}
				return
			}
			if err != nil || strings.TrimSpace(stdout.String()) != tc.want {
				t.Errorf("mirror = %q (err %v, stderr %q), want %s", stdout.String(), err, stderr.String(), tc.want)
			}
		})
	}
}

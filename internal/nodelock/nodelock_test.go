package nodelock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
)

func testLayout(t *testing.T) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// holderEnv makes the test binary a holder process: it takes the lock on
// the root named in the variable, says "held <pid>" and then waits to be
// killed.
const holderEnv = "NODELOCK_TEST_HOLD_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(holderEnv); root != "" {
		l, err := layout.New(root, "", "")
		if err == nil {
			var lk *Lock
			if lk, err = TryAcquire(l, "start"); err == nil {
				fmt.Printf("held %d\n", os.Getpid())
				defer lk.Release()
				select {}
			}
		}
		fmt.Println("error", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// holdInAnotherProcess starts a process that holds the lock on l as
// "start" and returns it with its pid.
func holdInAnotherProcess(t *testing.T, l layout.Layout) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+l.Root())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "held" {
		t.Fatalf("holder process: %q %v", line, err)
	}
	pid, _ := strconv.Atoi(f[1])
	return cmd, pid
}

// A second caller waits, is told who holds the lock (pid and command), and
// gets it once the holder dies: kill -9 leaves the file behind but not the
// lock.
func TestWaiterNamesTheHolderAndGetsTheLockWhenItDies(t *testing.T) {
	l := testLayout(t)
	holder, pid := holdInAnotherProcess(t, l)
	var told []Holder
	var mu sync.Mutex
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = holder.Process.Signal(syscall.SIGKILL)
	}()
	begin := time.Now()
	lk, err := Acquire(context.Background(), l, "reset", Wait{Timeout: 10 * time.Second, Notify: func(h Holder) {
		mu.Lock()
		told = append(told, h)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release()
	if waited := time.Since(begin); waited < 250*time.Millisecond {
		t.Errorf("got the lock after %v while another process held it", waited)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0].PID != pid || told[0].Command != "start" || time.Since(told[0].Since) > time.Minute {
		t.Fatalf("waiting was told %+v, want one notice naming start (pid %d)", told, pid)
	}
	if s := told[0].String(); !strings.HasPrefix(s, fmt.Sprintf("start (pid %d) since 20", pid)) {
		t.Errorf("holder reads %q", s)
	}
	// The new holder recorded itself.
	if h := readHolder(lk.f); h.PID != os.Getpid() || h.Command != "reset" {
		t.Errorf("recorded holder %+v", h)
	}
}

func TestBoundedWaitNamesTheHolder(t *testing.T) {
	l := testLayout(t)
	_, pid := holdInAnotherProcess(t, l)
	begin := time.Now()
	_, err := Acquire(context.Background(), l, "reset", Wait{Timeout: 400 * time.Millisecond})
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("want a *HeldError, got %v", err)
	}
	if took := time.Since(begin); took < 400*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %v, want about 400ms", took)
	}
	want := fmt.Sprintf("the node lock /var/lib/aks-flex-node/node.lock is still held by start (pid %d) since ", pid)
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), " after waiting 4") {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

func TestTryAcquireDoesNotWait(t *testing.T) {
	l := testLayout(t)
	a, err := TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err = TryAcquire(l, "agent keep-machine")
	var he *HeldError
	if !errors.As(err, &he) || he.Holder.Command != "start" || he.Holder.PID != os.Getpid() || he.Waited != 0 {
		t.Fatalf("second TryAcquire: %v (%+v)", err, he)
	}
	if time.Since(begin) > time.Second {
		t.Error("TryAcquire waited")
	}
	if !strings.HasPrefix(err.Error(), "the node lock /var/lib/aks-flex-node/node.lock is held by start (pid ") {
		t.Errorf("error %q", err)
	}
	a.Release()
	b, err := TryAcquire(l, "agent keep-machine")
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
}

func TestCancelledWaitNamesTheHolder(t *testing.T) {
	l := testLayout(t)
	a, err := TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = Acquire(ctx, l, "reset", Wait{Timeout: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "held by start (pid ") {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// Release removes the file and a state dir that holds nothing else, so a
// refused start on a fresh host leaves no trace; a state dir with anything
// in it stays.
func TestReleaseLeavesNoTrace(t *testing.T) {
	l := testLayout(t)
	dir := l.OnRoot(l.StateDir())
	lk, err := TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.OnRoot(Path(l))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file while held: %v %v", fi, err)
	}
	lk.Release()
	lk.Release() // twice is fine
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state dir made for the lock is still there: %v", err)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "install-record"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lk, err = TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	lk.Release()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "install-record" {
		t.Fatalf("state dir after release: %v", entries)
	}
}

// Many acquirers racing (each with its own open file, as separate
// processes have) never hold the lock at the same time, although every
// release removes the file they lock.
func TestMutualExclusionAcrossRemovals(t *testing.T) {
	l := testLayout(t)
	var inside, maxInside, total atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				lk, err := Acquire(context.Background(), l, "stress", Wait{Timeout: 30 * time.Second, Poll: time.Millisecond})
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				time.Sleep(50 * time.Microsecond)
				inside.Add(-1)
				total.Add(1)
				lk.Release()
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 || total.Load() != 8*40 {
		t.Fatalf("max holders at once %d (want 1), acquisitions %d", maxInside.Load(), total.Load())
	}
}

func TestLockFileMustBeARegularFile(t *testing.T) {
	l := testLayout(t)
	p := l.OnRoot(Path(l))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(outside, p); err != nil {
		t.Fatal(err)
	}
	if _, err := TryAcquire(l, "start"); err == nil || !strings.Contains(err.Error(), "lock /var/lib/aks-flex-node/node.lock") {
		t.Fatalf("a symlink in the lock's place: %v", err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the lock followed a symlink")
	}
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := TryAcquire(l, "start"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO in the lock's place: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a FIFO in the lock's place hangs")
	}
}

package progress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/task"
)

// openPTY opens a pseudo-terminal pair: what the command writes to tty
// comes out of ptm, as it would on a person's terminal.
func openPTY(t *testing.T) (ptm, tty *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 120}); err != nil {
		t.Fatal(err)
	}
	return ptm, tty
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// tasks are a start in miniature: one that changes something, one that
// waits, saying for what, and one that logs a warning.
func runTasks(ctx context.Context, con *Console, wait time.Duration) error {
	r := &task.Runner{Log: con.Log, Observer: con.Observer}
	_, err := r.Phases(ctx,
		task.Phase{Name: "host", Tasks: []task.Task{
			task.Func{N: "create-layout-dirs", F: func(context.Context) (task.Result, error) { return task.Result{Changed: true}, nil }},
		}},
		task.Phase{Name: "join", Tasks: []task.Task{
			task.Func{N: "wait-tls-bootstrap", F: func(ctx context.Context) (task.Result, error) {
				task.Wait(ctx, "the kubelet's TLS bootstrap")
				time.Sleep(wait)
				return task.Result{}, nil
			}},
			task.Func{N: "save-state", F: func(context.Context) (task.Result, error) {
				con.Log.Warn("state dir is on a slow disk", "path", "/var/lib/aks-flex-node")
				con.Log.Info("not shown on a terminal")
				return task.Result{}, nil
			}},
		}},
	)
	return err
}

// On a terminal, start shows each task as it runs, what a wait waits for
// with its elapsed time, each task's outcome and a summary line; no
// key=value task lines.
func TestDisplayOnATerminal(t *testing.T) {
	t.Setenv("INVOCATION_ID", "")
	t.Setenv("JOURNAL_STREAM", "")
	t.Setenv("TERM", "xterm")
	ptm, tty := openPTY(t)
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, ptm) // ends with EIO once tty is closed
		got <- b.String()
	}()
	con := NewConsole("start", tty, tty, slog.LevelInfo, false)
	if !con.Display() {
		t.Fatal("no display on a terminal")
	}
	err := runTasks(context.Background(), con, 1300*time.Millisecond)
	con.Finish(err)
	fmt.Fprintln(con.Progress, "[start] node node-1 joined in 1.3s")
	tty.Close()
	out := <-got
	for _, want := range []string{
		"[host]      create-layout-dirs           changed",
		"[join]      wait-tls-bootstrap           |",
		"waiting for the kubelet's TLS bootstrap",
		"[join]      wait-tls-bootstrap           ok       1.3",
		"\r\x1b[K",
		"state dir is on a slow disk",
		"[start] done: 3 tasks, 1 changed,",
		"[start] node node-1 joined in 1.3s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal does not show %q:\n%q", want, out)
		}
	}
	// The live line counts the seconds of the wait.
	if !strings.Contains(out, "| 1s  waiting for") && !strings.Contains(out, "/ 1s  waiting for") && !strings.Contains(out, "- 1s  waiting for") && !strings.Contains(out, "\\ 1s  waiting for") {
		t.Errorf("the live line does not count the wait's seconds:\n%q", out)
	}
	for _, unwanted := range []string{"msg=task", "msg=phase", "not shown on a terminal"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the terminal shows %q:\n%q", unwanted, out)
		}
	}
}

// A failed task is named in its line and in the summary.
func TestDisplayFailure(t *testing.T) {
	var out bytes.Buffer
	d := newDisplay("reset", &out, &out, displayOptions{ansi: true})
	r := &task.Runner{Log: slog.New(slog.DiscardHandler), Observer: d}
	_, err := r.Serial(context.Background(),
		task.Func{N: "remove-machine-kube1", F: func(context.Context) (task.Result, error) {
			return task.Result{}, errors.New("machine kube1 still active after 1m30s")
		}})
	d.Finish(err)
	for _, want := range []string{"remove-machine-kube1         FAILED", "machine kube1 still active after 1m30s", "[reset] failed at remove-machine-kube1: 1 task, 0 changed,"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q:\n%s", want, out.String())
		}
	}
}

// A terminal that cannot erase a line (TERM=dumb) gets no live line; a
// long wait is announced every few seconds instead.
func TestDisplayDumbTerminalAnnouncesWaits(t *testing.T) {
	var out syncBuffer
	d := newDisplay("start", &out, &out, displayOptions{ansi: false, redrawEvery: 10 * time.Millisecond, announceEvery: 100 * time.Millisecond})
	r := &task.Runner{Log: slog.New(slog.DiscardHandler), Observer: d}
	_, err := r.Serial(context.Background(), task.Func{N: "wait-node-ready", F: func(ctx context.Context) (task.Result, error) {
		task.Wait(ctx, "Node node-1 to be Ready (node registered, not Ready)")
		time.Sleep(450 * time.Millisecond)
		return task.Result{}, nil
	}})
	d.Finish(err)
	s := out.String()
	if n := strings.Count(s, "waiting for Node node-1 to be Ready"); n < 3 {
		t.Errorf("the wait was announced %d times in 450ms, want one every 100ms:\n%s", n, s)
	}
	if strings.Contains(s, "\x1b") || strings.Contains(s, "\r") {
		t.Errorf("escape sequences on a dumb terminal:\n%q", s)
	}
}

// Anywhere but a terminal (a pipe, a file, the journal) and with --output
// json there is no display: the logger and the lines are the plain ones
// the goldens in internal/lifecycle pin.
func TestNoDisplayOffTerminal(t *testing.T) {
	t.Setenv("INVOCATION_ID", "")
	t.Setenv("JOURNAL_STREAM", "")
	_, tty := openPTY(t)
	var buf bytes.Buffer
	for name, con := range map[string]*Console{
		"pipe":        NewConsole("start", &buf, &buf, slog.LevelInfo, false),
		"stderr pipe": NewConsole("start", tty, &buf, slog.LevelInfo, false),
		"json":        NewConsole("agent-upgrade", tty, tty, slog.LevelInfo, true),
	} {
		if con.Display() || con.Observer != nil {
			t.Errorf("%s: a display", name)
		}
	}
	t.Setenv("INVOCATION_ID", "0123")
	if con := NewConsole("start", tty, tty, slog.LevelInfo, false); con.Display() {
		t.Error("a display under systemd")
	}
}

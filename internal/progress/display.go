package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/aks-flex-node/internal/task"
)

// Display shows a command's tasks on a terminal: one line per finished
// task (phase, name, ok/changed/FAILED, duration), a live line under them
// with the running task, its elapsed time and what it waits for, redrawn a
// few times a second, and a summary line at the end. It is a task.Observer
// and a task.Waiter; what else the command prints goes through Write (to
// stdout) and LogWriter (to stderr) so the live line is cleared first.
//
// On a terminal that cannot erase a line (TERM=dumb) there is no live
// line: a wait is announced every AnnounceEvery instead.
type Display struct {
	cmd    string
	out    io.Writer
	errOut io.Writer
	ansi   bool
	width  func() int
	now    func() time.Time
	// AnnounceEvery is how often a wait is repeated on a dumb terminal.
	announceEvery time.Duration

	mu           sync.Mutex
	began        time.Time
	phase        string
	task         string
	taskBegan    time.Time
	wait         string
	waitSince    time.Time
	lastAnnounce time.Time
	drawn        bool
	spin         int
	tasks        int
	changed      int
	failed       string
	stop         chan struct{}
	done         chan struct{}
}

// displayOptions are the parts of a Display tests set.
type displayOptions struct {
	ansi          bool
	width         func() int
	now           func() time.Time
	redrawEvery   time.Duration
	announceEvery time.Duration
}

// newDisplay starts a display for command cmd (start, reset,
// agent-upgrade) writing to out and errOut, which are the same terminal.
func newDisplay(cmd string, out, errOut io.Writer, o displayOptions) *Display {
	if o.now == nil {
		o.now = time.Now
	}
	if o.width == nil {
		o.width = func() int { return 100 }
	}
	if o.redrawEvery == 0 {
		o.redrawEvery = 200 * time.Millisecond
	}
	if o.announceEvery == 0 {
		o.announceEvery = 5 * time.Second
	}
	d := &Display{cmd: cmd, out: out, errOut: errOut, ansi: o.ansi, width: o.width, now: o.now,
		announceEvery: o.announceEvery, began: o.now(), stop: make(chan struct{}), done: make(chan struct{})}
	go d.tick(o.redrawEvery)
	return d
}

func (d *Display) tick(every time.Duration) {
	defer close(d.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.mu.Lock()
			d.spin++
			d.redraw()
			d.mu.Unlock()
		}
	}
}

// PhaseStarted implements task.Observer.
func (d *Display) PhaseStarted(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.phase = name
}

// TaskStarted implements task.Observer.
func (d *Display) TaskStarted(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.task, d.taskBegan, d.wait = name, d.now(), ""
	d.redraw()
}

// TaskDone implements task.Observer: the task's line replaces the live
// line.
func (d *Display) TaskDone(name string, res task.Result, err error, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tasks++
	status := "ok"
	if res.Changed {
		d.changed++
		status = "changed"
	}
	line := fmt.Sprintf("%-11s %-28s %-8s %s", "["+d.phase+"]", name, status, roundDuration(took))
	if res.Detail != "" {
		line += "  " + res.Detail
	}
	if err != nil {
		d.failed = name
		line = fmt.Sprintf("%-11s %-28s %-8s %s  %v", "["+d.phase+"]", name, "FAILED", roundDuration(took), err)
	}
	d.task, d.wait = "", ""
	d.printLocked(d.out, line+"\n")
}

// Waiting implements task.Waiter. "" ends a wait outside a task.
func (d *Display) Waiting(what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if what == "" {
		d.clearLocked()
	}
	if what != d.wait {
		d.wait, d.waitSince = what, d.now()
		d.lastAnnounce = time.Time{}
	}
	d.redraw()
}

// Write prints p (whole lines) on stdout above the live line.
func (d *Display) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.printLocked(d.out, string(p))
}

// LogWriter is where log lines go: stderr, above the live line.
func (d *Display) LogWriter() io.Writer { return logWriter{d} }

type logWriter struct{ d *Display }

func (w logWriter) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.printLocked(w.d.errOut, string(p))
}

// Finish stops the live line and prints the summary: how many tasks ran,
// how many changed something, and the total time; on failure, which task
// failed.
func (d *Display) Finish(err error) {
	select {
	case <-d.stop:
		return
	default:
	}
	close(d.stop)
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clearLocked()
	total := roundDuration(d.now().Sub(d.began))
	tasks := plural(d.tasks, "task")
	switch {
	case err == nil:
		fmt.Fprintf(d.out, "[%s] done: %s, %d changed, %s\n", d.cmd, tasks, d.changed, total)
	case d.failed != "":
		fmt.Fprintf(d.out, "[%s] failed at %s: %s, %d changed, %s\n", d.cmd, d.failed, tasks, d.changed, total)
	default:
		fmt.Fprintf(d.out, "[%s] failed: %s, %d changed, %s\n", d.cmd, tasks, d.changed, total)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// printLocked clears the live line, writes s and draws the live line
// again below it.
func (d *Display) printLocked(w io.Writer, s string) (int, error) {
	d.clearLocked()
	n, err := io.WriteString(w, s)
	d.redraw()
	return n, err
}

func (d *Display) clearLocked() {
	if d.drawn {
		io.WriteString(d.out, "\r\x1b[K")
		d.drawn = false
	}
}

var spinner = []string{"|", "/", "-", "\\"}

// redraw draws the live line (with d.mu held), or on a dumb terminal
// announces a long wait every announceEvery. The live line names the
// running task; a wait outside any task (the preflight checks, an upgrade
// waiting for its outcome) is shown under the command's name.
func (d *Display) redraw() {
	if d.task == "" && d.wait == "" {
		return
	}
	now := d.now()
	prefix, name, since := "["+d.phase+"]", d.task, d.taskBegan
	if d.task == "" {
		prefix, since = "["+d.cmd+"]", d.waitSince
	}
	elapsed := now.Sub(since).Truncate(time.Second)
	if !d.ansi {
		if d.wait != "" && now.Sub(d.lastAnnounce) >= d.announceEvery {
			d.lastAnnounce = now
			if name != "" {
				name += ": "
			}
			fmt.Fprintf(d.out, "%-11s %s%s, waiting for %s\n", prefix, name, elapsed, d.wait)
		}
		return
	}
	line := fmt.Sprintf("%-11s %-28s %s %s", prefix, name, spinner[d.spin%len(spinner)], elapsed)
	if d.wait != "" {
		line += "  waiting for " + d.wait
	}
	io.WriteString(d.out, "\r\x1b[K"+truncate(line, d.width()-1))
	d.drawn = true
}

// truncate cuts s to n runes, so the live line never wraps (a wrapped
// line cannot be erased with one carriage return).
func truncate(s string, n int) string {
	if n < 10 {
		n = 10
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// roundDuration shows a duration the way a person reads it: 12ms, 1.23s,
// 41.2s, 2m3s.
func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

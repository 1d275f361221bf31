package progress

import (
	"context"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/task"
)

// Console is where a command that changes the node writes: its logger,
// the writer for its own lines, and, on a terminal, the display that
// observes its task Runner.
type Console struct {
	// Log is the command's logger. With a display, task and phase lines
	// are left to the display and only warnings and errors are shown
	// (everything at agent.logLevel debug).
	Log *slog.Logger
	// Progress takes the command's own lines ("[start] node x joined in
	// 41s"): stdout, or the display, which keeps them above its live line.
	Progress io.Writer
	// Observer is the display, for the command's task.Runner; nil when
	// there is none.
	Observer task.Observer
	display  *Display
}

// NewConsole sets up the output of command cmd. There is a display only
// when stdout and stderr are both a terminal, the process does not run
// under systemd, and plain is false (--output json): everywhere else the
// lines are the ones scripts and the journal read, unchanged.
func NewConsole(cmd string, stdout, stderr io.Writer, level slog.Level, plain bool) *Console {
	fd, tty := terminal(stdout)
	_, errTTY := terminal(stderr)
	if plain || !tty || !errTTY || UnderSystemd() {
		return &Console{Log: Logger(stderr, level), Progress: stdout}
	}
	d := newDisplay(cmd, stdout, stderr, displayOptions{
		ansi:  os.Getenv("TERM") != "dumb",
		width: func() int { return terminalWidth(fd) },
	})
	return &Console{Log: displayLogger(d, level), Progress: d, Observer: d, display: d}
}

// Display says whether the console shows a display.
func (c *Console) Display() bool { return c.display != nil }

// Context returns ctx carrying the display, so waits outside a task
// (task.Wait) show on it.
func (c *Console) Context(ctx context.Context) context.Context {
	if c.display == nil {
		return ctx
	}
	return task.WithObserver(ctx, c.display)
}

// Finish ends the display with its summary line; err is the command's
// outcome. Without a display it does nothing.
func (c *Console) Finish(err error) {
	if c.display != nil {
		c.display.Finish(err)
	}
}

// displayLogger logs through the display, leaving task and phase lines to
// it; below debug level only warnings and errors show, as the display says
// what every task did.
func displayLogger(d *Display, level slog.Level) *slog.Logger {
	if level > slog.LevelDebug {
		level = slog.LevelWarn
	}
	// No time stamp: the display says how long everything took.
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	return slog.New(skipTaskLines{slog.NewTextHandler(d.LogWriter(), opts)})
}

type skipTaskLines struct{ slog.Handler }

func (h skipTaskLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "task" || r.Message == "phase" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h skipTaskLines) WithAttrs(as []slog.Attr) slog.Handler {
	return skipTaskLines{h.Handler.WithAttrs(as)}
}

func (h skipTaskLines) WithGroup(name string) slog.Handler {
	return skipTaskLines{h.Handler.WithGroup(name)}
}

// terminal reports whether w is a terminal, and its descriptor.
func terminal(w io.Writer) (int, bool) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return -1, false
	}
	fd := int(f.Fd())
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return fd, err == nil
}

func terminalWidth(fd int) int {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}

// Package progress owns how the commands that change a node (start, reset,
// agent-upgrade) talk to the person or the journal watching them: plain
// key=value lines under systemd, in a pipe or with --output json (the
// format scripts and the journal read, kept byte for byte), and on a
// terminal a display of each task as it runs, what a long wait waits for,
// and a summary line, driven by the task Runner's events.
package progress

import (
	"io"
	"log/slog"
	"os"
)

// UnderSystemd says this process was started by systemd (a unit or a
// `systemd-run`): its output goes to the journal, which stamps each line
// itself and is read by tools, never a display.
func UnderSystemd() bool {
	return os.Getenv("JOURNAL_STREAM") != "" || os.Getenv("INVOCATION_ID") != ""
}

// Logger is the slog logger of a command writing to w: key=value lines,
// without the time under systemd (journald adds its own timestamps).
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, handlerOptions(level)))
}

func handlerOptions(level slog.Leveler) *slog.HandlerOptions {
	opts := &slog.HandlerOptions{Level: level}
	if UnderSystemd() {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return opts
}

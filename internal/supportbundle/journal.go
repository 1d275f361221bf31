package supportbundle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// tailWriter keeps the last max bytes written to it: output grows into
// a buffer until max, then wraps in a ring of max bytes. A journal of
// gigabytes costs max bytes, not its size (it used to be read whole and
// then cut).
type tailWriter struct {
	max   int64
	buf   []byte // until it holds max bytes
	ring  []byte // then: len max, oldest byte at pos
	pos   int
	total int64
}

func newTailWriter(max int64) *tailWriter {
	if max < 1 {
		max = 1
	}
	return &tailWriter{max: max}
}

func (t *tailWriter) Write(p []byte) (int, error) {
	n := len(p)
	t.total += int64(n)
	if t.ring == nil {
		if need := len(t.buf) + len(p); int64(need) <= t.max {
			if need > cap(t.buf) {
				// Doubling, capped at max: the buffer becomes the ring.
				nb := make([]byte, len(t.buf), min(t.max, int64(max(2*cap(t.buf), need, 4096))))
				copy(nb, t.buf)
				t.buf = nb
			}
			t.buf = append(t.buf, p...)
			return n, nil
		}
		ring := t.buf[:cap(t.buf)]
		if int64(len(ring)) != t.max {
			ring = make([]byte, t.max)
		}
		keep := int(t.max) - len(p) // bytes of buf that stay
		if keep > 0 {
			copy(ring, t.buf[len(t.buf)-keep:]) // memmove: may overlap
			copy(ring[keep:], p)
		} else {
			copy(ring, p[len(p)-int(t.max):])
		}
		t.ring, t.buf, t.pos = ring, nil, 0
		return n, nil
	}
	if int64(len(p)) >= t.max {
		copy(t.ring, p[len(p)-int(t.max):])
		t.pos = 0
		return n, nil
	}
	c := copy(t.ring[t.pos:], p)
	copy(t.ring, p[c:])
	t.pos = (t.pos + len(p)) % int(t.max)
	return n, nil
}

// Bytes is what tail made of the whole output: all of it when it fits,
// else its last max bytes from a line start, marked as cut. It reorders
// the ring in place; write no more after it.
func (t *tailWriter) Bytes() []byte {
	if t.ring == nil {
		return t.buf
	}
	reverse(t.ring[:t.pos])
	reverse(t.ring[t.pos:])
	reverse(t.ring)
	t.pos = 0
	return cutMarked(t.ring, t.max)
}

func (t *tailWriter) capacity() int { return max(cap(t.buf), cap(t.ring)) }

func reverse(b []byte) {
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}

// cutMarked is the last max bytes b holds, from its first line start,
// with the line that says it was cut.
func cutMarked(last []byte, max int64) []byte {
	if i := bytes.IndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	return append([]byte(fmt.Sprintf("[aks-flex-node: cut to its last %d bytes]\n", max)), last...)
}

// Streamer runs a command with its standard output written to w as it
// comes.
type Streamer func(ctx context.Context, w io.Writer, name string, args ...string) error

// streamExec is the Streamer that runs commands with os/exec; it keeps
// the end of standard error for the error.
func streamExec(ctx context.Context, w io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	stderr := newTailWriter(4 << 10)
	cmd.Stdout, cmd.Stderr = w, stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(string(stderr.Bytes())); msg != "" {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// runTail runs a command and keeps the last max bytes of its output,
// streamed: with Options.Stream, or os/exec when Options.Exec is nil too;
// a caller's Exec alone (whole outputs) is cut afterwards.
func (c *collector) runTail(ctx context.Context, max int64, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	stream := c.o.Stream
	if stream == nil && c.o.Exec == nil {
		stream = streamExec
	}
	if stream == nil {
		out, err := c.o.Exec(ctx, name, args...)
		return tail(out, max), err
	}
	w := newTailWriter(max)
	err := stream(ctx, w, name, args...)
	return w.Bytes(), err
}

// addJournal adds a journal read by a command, streamed into a bounded
// buffer; one that failed without printing anything is listed as
// missing, with its error.
func (c *collector) addJournal(ctx context.Context, member, source string, name string, args ...string) error {
	out, err := c.runTail(ctx, c.o.JournalMax, name, args...)
	if err != nil && len(bytes.TrimSpace(out)) == 0 {
		c.missing(member, err.Error())
		return nil
	}
	if err != nil {
		out = append(out, fmt.Sprintf("\n[aks-flex-node: %s: %v]\n", source, err)...)
	}
	return c.a.add(member, source, out)
}

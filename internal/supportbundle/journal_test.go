package supportbundle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// Long lines keep the reader's per-line cost (and the test's time under
// -race) small.
var journalLine = "2026-12-06T04:00:00+0000 host kubelet[1]: line at %012d of the journal " + strings.Repeat("x", 960) + "\n"

// appendJournalLine is fmt.Sprintf(journalLine, off) without fmt's
// allocation per line, which would be the test's own garbage.
func appendJournalLine(b []byte, off int64) []byte {
	b = append(b, "2026-12-06T04:00:00+0000 host kubelet[1]: line at "...)
	var num [20]byte
	d := strconv.AppendInt(num[:0], off, 10)
	for range 12 - len(d) {
		b = append(b, '0')
	}
	return append(append(b, d...), journalLine[len(journalLine)-len(" of the journal \n")-960:]...)
}

// journalReader is a journal of n bytes of numbered lines, made as it is
// read: it holds no more than one line.
type journalReader struct {
	n, off int64
	line   []byte
	i      int
}

func (r *journalReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	w := 0
	for w < len(p) && r.off < r.n {
		if r.i >= len(r.line) {
			r.line = appendJournalLine(r.line[:0], r.off)
			r.i = 0
		}
		c := copy(p[w:], r.line[r.i:])
		if rest := r.n - r.off; int64(c) > rest {
			c = int(rest)
		}
		w, r.i, r.off = w+c, r.i+c, r.off+int64(c)
	}
	return w, nil
}

// Issue 26 item 9: a journal is streamed into a buffer of JournalMax
// bytes that keeps its end (the current semantics), never read whole:
// five 32 MiB journals cut to 512 KiB each allocate a bounded amount, not
// the 160 MiB a whole read takes.
func TestDebugBundleStreamsJournalsIntoABoundedBuffer(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	const size, jmax = 32 << 20, 512 << 10
	streamed := 0
	stream := func(_ context.Context, w io.Writer, name string, _ ...string) error {
		if name != "journalctl" {
			return fmt.Errorf("unexpected %s", name)
		}
		streamed++
		_, err := io.Copy(w, &journalReader{n: size})
		return err
	}
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Collect(context.Background(), Options{Layout: l, Output: out, Exec: fakeExec, Stream: stream, JournalMax: jmax, MaxBytes: 256 << 20})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if streamed < 5 {
		t.Fatalf("%d journals streamed, want the host's 5", streamed)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d journals of %d MiB cut to %d KiB: %.1f MiB allocated", streamed, size>>20, jmax>>10, float64(alloc)/(1<<20))
	if limit := uint64(streamed) * size / 2; alloc > limit {
		t.Errorf("collecting %d journals of %d MiB allocated %d MiB, more than %d MiB: a journal is read whole", streamed, size>>20, alloc>>20, limit>>20)
	}
	got, _ := members(t, out)
	j := got["logs/journal/"+layout.AgentUnitName+".log"]
	// Lines are of one length, each numbered by its offset: the journal's
	// last bytes are its last line's, as far as the size reaches.
	lineLen := int64(len(fmt.Sprintf(journalLine, 0)))
	last := (size - 1) / lineLen * lineLen
	end := fmt.Sprintf(journalLine, last)[:size-last]
	if !strings.HasPrefix(j, fmt.Sprintf("[aks-flex-node: cut to its last %d bytes]\n", jmax)) || !strings.HasSuffix(j, end) {
		t.Errorf("the journal does not keep its last %d bytes: starts %q, ends %q", jmax, j[:min(len(j), 80)], j[max(0, len(j)-80):])
	}
}

// The bounded buffer keeps exactly what cutting the whole output did,
// whatever the write sizes.
func TestTailWriterKeepsWhatTailKept(t *testing.T) {
	var whole bytes.Buffer
	for i := range 500 {
		fmt.Fprintf(&whole, "line %d %s\n", i, strings.Repeat("x", i%37))
	}
	for _, limit := range []int64{1, 10, 100, 4096, int64(whole.Len()), int64(whole.Len()) + 1, 1 << 20} {
		for _, chunk := range []int{1, 7, 64, 1000, whole.Len()} {
			w := newTailWriter(limit)
			data := whole.Bytes()
			for len(data) > 0 {
				n := min(chunk, len(data))
				w.Write(data[:n])
				data = data[n:]
			}
			if got, want := w.Bytes(), tail(whole.Bytes(), limit); !bytes.Equal(got, want) {
				t.Errorf("max %d, writes of %d: got %d bytes %q..., want %d bytes %q...", limit, chunk, len(got), got[:min(len(got), 40)], len(want), want[:min(len(want), 40)])
			}
		}
	}
	// The buffer never grows past max, however much is written.
	w := newTailWriter(4096)
	if _, err := io.Copy(w, &journalReader{n: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if c := w.capacity(); c > 4096 {
		t.Errorf("buffer capacity %d after 64 MiB, want at most 4096", c)
	}
}

// BenchmarkJournalTail: the bytes a 256 MiB journal costs, cut to 8 MiB.
func BenchmarkJournalTail(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		w := newTailWriter(DefaultJournalMax)
		if _, err := io.Copy(w, &journalReader{n: 256 << 20}); err != nil {
			b.Fatal(err)
		}
		_ = w.Bytes()
	}
}

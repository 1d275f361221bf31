package preflight

import (
	"errors"
	"strings"
	"testing"
)

// TestTextWriterCheck: the one way a check's result is printed, by
// preflight and by debug alike.
func TestTextWriterCheck(t *testing.T) {
	var b strings.Builder
	w := NewTextWriter(&b)
	w.Check("", CheckResult{Name: "a", Severity: SeverityOK})
	w.Check("", CheckResult{Name: "b", Severity: SeverityOK, Message: "fine"})
	w.Check("", CheckResult{Name: "c", Severity: SeverityWarning, Message: "hm", Remedy: "look"})
	w.Check("", CheckResult{Name: "d", Severity: SeverityWarning, Message: "no remedy"})
	w.Check("", CheckResult{Name: "e", Severity: SeverityError, Message: "bad", Remedy: "fix", Ignored: true})
	w.Check("\t", CheckResult{Name: "f", Severity: SeverityError, Message: "bad", Remedy: "fix"})
	want := "[OK a]\n[OK b]: fine\n[WARNING c]: hm\n\tremedy: look\n[WARNING d]: no remedy\n" +
		"[WARNING e]: bad (error ignored with --ignore-preflight-errors)\n\tremedy: fix\n" +
		"\t[ERROR f]: bad\n\t\tremedy: fix\n"
	if b.String() != want || w.Err() != nil {
		t.Fatalf("got:\n%s\nwant:\n%s(err %v)", b.String(), want, w.Err())
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

// TestTextWriterKeepsFirstError: after a failed write nothing more is
// written and the error is the first one.
func TestTextWriterKeepsFirstError(t *testing.T) {
	f := &failWriter{}
	w := NewTextWriter(f)
	w.Printf("x\n")
	w.Check("", CheckResult{Name: "a", Severity: SeverityError, Message: "m", Remedy: "r"})
	if w.Err() == nil || f.n != 1 {
		t.Fatalf("err %v after %d writes, want the first write's error and no more writes", w.Err(), f.n)
	}
}

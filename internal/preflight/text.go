package preflight

import (
	"fmt"
	"io"
)

// TextWriter writes a check report as text, kubeadm's way: a line per
// check, "[OK name]: message", "[WARNING name]: message" or
// "[ERROR name]: message", each warning's and error's remedy on the line
// below it. preflight and debug both print through it, so their reports
// read alike. It keeps the first write error: a report is many small
// writes and one error to return.
type TextWriter struct {
	w   io.Writer
	err error
}

// NewTextWriter writes to w.
func NewTextWriter(w io.Writer) *TextWriter { return &TextWriter{w: w} }

// Printf writes one formatted piece (a header, a summary).
func (t *TextWriter) Printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// Check writes c's line, indented by indent, and its remedy one tab
// deeper when it has one. An error made non-fatal by
// --ignore-preflight-errors is written as the warning it counts as.
func (t *TextWriter) Check(indent string, c CheckResult) {
	label, suffix := "ERROR", ""
	switch {
	case c.Severity == SeverityOK:
		label = "OK"
	case c.Severity == SeverityWarning:
		label = "WARNING"
	case c.Ignored:
		label, suffix = "WARNING", " (error ignored with --ignore-preflight-errors)"
	}
	if c.Message == "" && suffix == "" {
		t.Printf("%s[%s %s]\n", indent, label, c.Name)
	} else {
		t.Printf("%s[%s %s]: %s%s\n", indent, label, c.Name, c.Message, suffix)
	}
	if c.Severity != SeverityOK && c.Remedy != "" {
		t.Printf("%s\tremedy: %s\n", indent, c.Remedy)
	}
}

// Err is the first write error.
func (t *TextWriter) Err() error { return t.err }

package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Evidence is what a failed node attaches to its rollout so an operator
// need not log in (issue 30, item 7): where and why it failed, how long
// each phase took, the end of the failed side's kubelet and containerd
// journals (bounded, redacted by the support bundle's redactor) and the
// path of the full debug bundle it wrote on the host. The node puts it
// on its own Node as the annotation EvidenceAnnotation (the Node
// authorizer lets a node patch its own Node; `fleet status --node NAME`
// reads it there) and a short form (Message) in an Event.
type Evidence struct {
	Node       string        `json:"node"`
	Rollout    string        `json:"rollout"`
	Generation int64         `json:"generation"`
	Step       string        `json:"step"`
	Reason     string        `json:"reason,omitempty"`
	Error      string        `json:"error"`
	Side       string        `json:"side,omitempty"` // the machine that failed (kube1 or kube2)
	Phases     []PhaseTiming `json:"phases,omitempty"`
	Journals   []JournalTail `json:"journals,omitempty"`
	Bundle     string        `json:"bundle,omitempty"` // the debug bundle's path on the host
	At         time.Time     `json:"at"`
}

// PhaseTiming is how long one step took (stage, drain, switch, soak).
type PhaseTiming struct {
	Step     string        `json:"step"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"durationNanos"`
}

// JournalTail is the end of one unit's journal on the failed side.
type JournalTail struct {
	Unit       string   `json:"unit"`
	Lines      []string `json:"lines,omitempty"`
	Redactions int      `json:"redactions,omitempty"`
	// Cut: older lines were left out (by the reader's bound or to fit
	// the annotation).
	Cut   bool   `json:"cut,omitempty"`
	Error string `json:"error,omitempty"`
}

// EvidenceAnnotation holds a node's Evidence (JSON) on its own Node.
const EvidenceAnnotation = "flexnode.azure.com/evidence"

// Bounds: the annotation must stay far below the 256 KiB every Node's
// annotations share; an Event's message is kept to the 1 KiB that
// events.k8s.io/v1 allows a note.
const (
	MaxEvidenceBytes = 16 << 10
	MaxEventMessage  = 1024
	// EvidenceLines and EvidenceJournalBytes bound each journal as read.
	EvidenceLines        = 40
	EvidenceJournalBytes = 8 << 10
)

// EvidenceUnits are the units whose journals a failure attaches.
var EvidenceUnits = []string{"kubelet.service", "containerd.service"}

// JournalReader reads the last lines of unit's journal in machine side,
// at most maxBytes, redacted; supportbundle.JournalTail is one.
type JournalReader func(ctx context.Context, side, unit string, lines int, maxBytes int64) (data []byte, redactions int, err error)

// CollectJournals adds the failed side's journals to e (e.Side must be
// set). A journal that cannot be read says why in its Error: evidence is
// collected on the way to reporting a failure and never stops it.
func (e *Evidence) CollectJournals(ctx context.Context, read JournalReader) {
	for _, u := range EvidenceUnits {
		data, n, err := read(ctx, e.Side, u, EvidenceLines, EvidenceJournalBytes)
		j := JournalTail{Unit: u, Redactions: n}
		if err != nil {
			j.Error = bounded(err.Error(), 512)
		}
		text := strings.TrimRight(string(data), "\n")
		if rest, ok := strings.CutPrefix(text, "[aks-flex-node: cut to its last"); ok {
			j.Cut = true
			_, text, _ = strings.Cut(rest, "\n")
		}
		if text != "" && text != "-- No entries --" {
			j.Lines = strings.Split(text, "\n")
		}
		if len(j.Lines) > EvidenceLines {
			j.Lines, j.Cut = j.Lines[len(j.Lines)-EvidenceLines:], true
		}
		e.Journals = append(e.Journals, j)
	}
}

// Annotation is e as the annotation's value: JSON of at most
// MaxEvidenceBytes, the oldest journal lines dropped first to fit, then
// the error cut.
func (e Evidence) Annotation() (string, error) {
	e.Journals = append([]JournalTail(nil), e.Journals...)
	for i := range e.Journals {
		e.Journals[i].Lines = append([]string(nil), e.Journals[i].Lines...)
	}
	e.Error = bounded(e.Error, 2048)
	for {
		b, err := json.Marshal(e)
		if err != nil {
			return "", fmt.Errorf("evidence of node %s: %w", e.Node, err)
		}
		if len(b) <= MaxEvidenceBytes {
			return string(b), nil
		}
		if !e.dropOldestLine() {
			return "", fmt.Errorf("evidence of node %s: %d bytes with no journal line left to drop", e.Node, len(b))
		}
	}
}

// dropOldestLine drops the oldest line of the longest journal.
func (e *Evidence) dropOldestLine() bool {
	best := -1
	for i, j := range e.Journals {
		if len(j.Lines) > 0 && (best < 0 || len(j.Lines) > len(e.Journals[best].Lines)) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	e.Journals[best].Lines, e.Journals[best].Cut = e.Journals[best].Lines[1:], true
	return true
}

// ReadEvidence is n's Evidence; nil without the annotation. Cluster data
// is input: a value that is not Evidence, or is over the bound, is an
// error.
func ReadEvidence(n *corev1.Node) (*Evidence, error) {
	v, ok := n.Annotations[EvidenceAnnotation]
	if !ok {
		return nil, nil
	}
	if len(v) > MaxEvidenceBytes {
		return nil, fmt.Errorf("node %s: annotation %s: %d bytes, over %d", n.Name, EvidenceAnnotation, len(v), MaxEvidenceBytes)
	}
	var e Evidence
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("node %s: annotation %s: %w", n.Name, EvidenceAnnotation, err)
	}
	return &e, nil
}

// EvidencePatch is the merge patch that sets the annotation on the
// node's own Node.
func EvidencePatch(e Evidence) ([]byte, error) {
	v, err := e.Annotation()
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{EvidenceAnnotation: v}}})
}

// Text is e as fleet status --node shows it, whole.
func (e Evidence) Text() string {
	var b bytes.Buffer
	e.head(&b)
	for _, j := range e.Journals {
		e.journal(&b, j, len(j.Lines))
	}
	return b.String()
}

// Message is e as an Event's message, at most max bytes: the failure,
// the timings, the bundle's path and as many of the newest journal lines
// as fit (whole lines only).
func (e Evidence) Message(max int) string {
	var head bytes.Buffer
	e.head(&head)
	if head.Len() >= max {
		return bounded(head.String(), max)
	}
	// The most lines per journal that fit, the same count for each.
	best := head.String()
	for n := 1; n <= EvidenceLines; n++ {
		b := bytes.NewBuffer(append([]byte(nil), head.Bytes()...))
		for _, j := range e.Journals {
			e.journal(b, j, n)
		}
		if b.Len() > max {
			break
		}
		best = b.String()
	}
	return best
}

func (e Evidence) head(b *bytes.Buffer) {
	fmt.Fprintf(b, "node %s failed at %s", e.Node, e.Step)
	if e.Reason != "" {
		fmt.Fprintf(b, " (%s)", e.Reason)
	}
	fmt.Fprintf(b, ": %s\n", e.Error)
	if len(e.Phases) > 0 {
		b.WriteString("timings:")
		for _, p := range e.Phases {
			fmt.Fprintf(b, " %s %s", p.Step, p.Duration.Round(time.Millisecond))
		}
		b.WriteString("\n")
	}
	if e.Bundle != "" {
		fmt.Fprintf(b, "debug bundle on the host: %s\n", e.Bundle)
	}
}

func (e Evidence) journal(b *bytes.Buffer, j JournalTail, n int) {
	lines := j.Lines[len(j.Lines)-min(n, len(j.Lines)):]
	fmt.Fprintf(b, "%s on %s", j.Unit, e.Side)
	if j.Error != "" {
		fmt.Fprintf(b, " (%s)", j.Error)
	}
	fmt.Fprintf(b, ", last %d lines:\n", len(lines))
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
}

// bounded is s cut to n bytes, never inside a UTF-8 sequence.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

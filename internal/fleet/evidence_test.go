package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func failed() Evidence {
	return Evidence{Node: "edge-1", Rollout: "edge-b", Generation: 2, Step: "switch", Reason: "RolledBack",
		Error: "kubelet on kube2 exited 1 times in 30s", Side: "kube2", Bundle: "/var/lib/aks-flex-node/bundles/rollout-edge-b.tar.gz",
		Phases: []PhaseTiming{{Step: "stage", Start: t0, Duration: 41 * time.Second}, {Step: "switch", Start: t0.Add(time.Minute), Duration: 12500 * time.Millisecond}},
		At:     t0}
}

// journalLines are n lines of width bytes each, numbered.
func journalLines(unit string, n, width int) []byte {
	var b strings.Builder
	for i := range n {
		l := fmt.Sprintf("2026-12-06T05:00:%02d+0000 kube2 %s[42]: line %04d ", i%60, unit, i)
		b.WriteString(l + strings.Repeat("x", max(width-len(l), 0)) + "\n")
	}
	return []byte(b.String())
}

func TestCollectJournals(t *testing.T) {
	e := failed()
	var asked []string
	e.CollectJournals(context.Background(), func(_ context.Context, side, unit string, lines int, maxBytes int64) ([]byte, int, error) {
		asked = append(asked, fmt.Sprintf("%s %s %d %d", side, unit, lines, maxBytes))
		if unit == "containerd.service" {
			return nil, 0, errors.New("journal of containerd.service in machine kube2: no /var/log/journal")
		}
		// What the bounded reader returns when it cut: its marker first.
		return append([]byte("[aks-flex-node: cut to its last 8192 bytes]\n"), journalLines(unit, 60, 80)...), 3, nil
	})
	if len(asked) != 2 || asked[0] != fmt.Sprintf("kube2 kubelet.service %d %d", EvidenceLines, EvidenceJournalBytes) {
		t.Fatalf("asked %v", asked)
	}
	k, c := e.Journals[0], e.Journals[1]
	if len(k.Lines) != EvidenceLines || !k.Cut || k.Redactions != 3 || !strings.Contains(k.Lines[EvidenceLines-1], "line 0059") || strings.HasPrefix(k.Lines[0], "[aks") {
		t.Errorf("kubelet %d lines, cut %v, redactions %d, last %q", len(k.Lines), k.Cut, k.Redactions, k.Lines[len(k.Lines)-1])
	}
	if c.Error == "" || len(c.Lines) != 0 {
		t.Errorf("containerd %+v", c)
	}
}

func TestEvidenceAnnotationBoundAndRoundTrip(t *testing.T) {
	e := failed()
	for _, u := range EvidenceUnits {
		e.Journals = append(e.Journals, JournalTail{Unit: u, Lines: strings.Split(strings.TrimSpace(string(journalLines(u, EvidenceLines, 1000))), "\n")})
	}
	v, err := e.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > MaxEvidenceBytes || len(v) < MaxEvidenceBytes-1100 {
		t.Fatalf("annotation %d bytes, want at most %d and not much less", len(v), MaxEvidenceBytes)
	}
	if len(e.Journals[0].Lines) != EvidenceLines {
		t.Fatal("Annotation changed its receiver's lines")
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Annotations: map[string]string{EvidenceAnnotation: v}}}
	got, err := ReadEvidence(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range got.Journals {
		if !j.Cut || len(j.Lines) == 0 || !strings.Contains(j.Lines[len(j.Lines)-1], fmt.Sprintf("line %04d", EvidenceLines-1)) {
			t.Errorf("%s: the newest lines were not the ones kept: cut %v, %d lines", j.Unit, j.Cut, len(j.Lines))
		}
	}
	if got.Step != e.Step || got.Phases[1].Duration != 12500*time.Millisecond || got.Bundle != e.Bundle {
		t.Errorf("round trip %+v", got)
	}
	for name, bad := range map[string]string{
		"not json":      "kubelet exited",
		"unknown field": `{"node":"a","command":"rm -rf /"}`,
		"over bound":    `{"node":"` + strings.Repeat("a", MaxEvidenceBytes) + `"}`,
	} {
		n.Annotations[EvidenceAnnotation] = bad
		if _, err := ReadEvidence(n); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	delete(n.Annotations, EvidenceAnnotation)
	if got, err := ReadEvidence(n); got != nil || err != nil {
		t.Errorf("no annotation: %v, %v", got, err)
	}
}

func TestEvidenceMessageBound(t *testing.T) {
	e := failed()
	for _, u := range EvidenceUnits {
		e.Journals = append(e.Journals, JournalTail{Unit: u, Lines: strings.Split(strings.TrimSpace(string(journalLines(u, EvidenceLines, 120))), "\n")})
	}
	m := e.Message(MaxEventMessage)
	if len(m) > MaxEventMessage {
		t.Fatalf("message %d bytes", len(m))
	}
	for _, want := range []string{"node edge-1 failed at switch (RolledBack): kubelet on kube2 exited", "timings: stage 41s switch 12.5s",
		"debug bundle on the host: /var/lib/aks-flex-node/bundles/", fmt.Sprintf("line %04d", EvidenceLines-1), "containerd.service on kube2, last"} {
		if !strings.Contains(m, want) {
			t.Errorf("message lacks %q:\n%s", want, m)
		}
	}
	// Whole lines only, and the whole evidence in Text.
	for _, l := range strings.Split(strings.TrimSpace(m), "\n") {
		if strings.HasPrefix(l, "  2026") && !strings.HasSuffix(l, "x") {
			t.Errorf("cut line %q", l)
		}
	}
	if txt := e.Text(); strings.Count(txt, "\n  2026") != 2*EvidenceLines {
		t.Errorf("Text has %d journal lines", strings.Count(txt, "\n  2026"))
	}
	// A huge error still fits.
	e.Error = strings.Repeat("é", 4000)
	if m := e.Message(MaxEventMessage); len(m) > MaxEventMessage || !strings.HasPrefix(m, "node edge-1") {
		t.Errorf("huge error: %d bytes", len(m))
	}
}

package task

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestSerialStopsAtFirstFailureAndLogsOneLineEach(t *testing.T) {
	var buf bytes.Buffer
	r := &Runner{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	var ran []string
	mk := func(name string, changed bool, err error) Task {
		return Func{N: name, F: func(context.Context) (Result, error) { ran = append(ran, name); return Result{Changed: changed}, err }}
	}
	changed, err := r.Serial(context.Background(), mk("a", false, nil), mk("b", true, nil), mk("c", false, errors.New("boom")), mk("d", false, nil))
	if err == nil || err.Error() != "c: boom" {
		t.Fatalf("err = %v, want wrapped with the task name", err)
	}
	if !changed || strings.Join(ran, ",") != "a,b,c" {
		t.Fatalf("changed=%v ran=%v", changed, ran)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "task=a") || !strings.Contains(lines[0], "status=ok changed=false") || !strings.Contains(lines[2], "status=failed") {
		t.Fatalf("log lines:\n%s", buf.String())
	}
}

// Phases keep the task lines as Serial writes them, add one line per
// phase after its tasks, stop at the first failing phase, and wrap errors
// with the task name only.
func TestPhasesLogPerTaskAndPerPhase(t *testing.T) {
	var buf bytes.Buffer
	r := &Runner{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	mk := func(name string, changed bool, err error) Task {
		return Func{N: name, F: func(context.Context) (Result, error) { return Result{Changed: changed}, err }}
	}
	changed, err := r.Phases(context.Background(),
		Phase{Name: "one", Tasks: []Task{mk("a", false, nil), mk("b", true, nil)}},
		Phase{Name: "two", Tasks: []Task{mk("c", false, errors.New("boom"))}},
		Phase{Name: "three", Tasks: []Task{mk("d", false, nil)}},
	)
	if err == nil || err.Error() != "c: boom" || !changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"task=a status=ok changed=false", "task=b status=ok changed=true", "phase=one status=ok changed=true", "task=c status=failed", "phase=two status=failed changed=false"}
	if len(lines) != len(want) {
		t.Fatalf("log lines:\n%s", buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q does not contain %q", i, lines[i], w)
		}
	}
}

func TestOutputNamesItsProducer(t *testing.T) {
	o := NewOutput[string]("stage-node-components")
	if _, err := o.Get(); err == nil || err.Error() != "no string: stage-node-components did not run" {
		t.Fatalf("unset output: %v", err)
	}
	o.Set("/dir")
	if v, err := o.Get(); err != nil || v != "/dir" {
		t.Fatalf("set output: %q %v", v, err)
	}
}

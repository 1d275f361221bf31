package task

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func TestSerialStopsAtFirstFailureAndLogsOneLineEach(t *testing.T) {
	var buf lockedBuf
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
	lines := strings.Split(strings.TrimSpace(buf.b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "task=a") || !strings.Contains(lines[0], "status=ok changed=false") || !strings.Contains(lines[2], "status=failed") {
		t.Fatalf("log lines:\n%s", buf.b.String())
	}
}

func TestParallelRunsAllAndReportsFirstInOrder(t *testing.T) {
	var buf lockedBuf
	r := &Runner{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	var mu sync.Mutex
	n := 0
	mk := func(name string, err error) Task {
		return Func{N: name, F: func(context.Context) (Result, error) { mu.Lock(); n++; mu.Unlock(); return Result{}, err }}
	}
	_, err := r.Parallel(context.Background(), mk("a", nil), mk("b", errors.New("x")), mk("c", errors.New("y")))
	if err == nil || err.Error() != "b: x" || n != 3 {
		t.Fatalf("err=%v n=%d", err, n)
	}
	if r.Changed() {
		t.Error("nothing changed")
	}
}

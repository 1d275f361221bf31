package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/progress"
	"github.com/Azure/aks-flex-node/internal/task"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fakeClock advances by step at every reading, so durations are the same
// on every run.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { t = t.Add(step); return t }
}

func fakeTask(name string, changed bool, detail string, err error) task.Task {
	return task.Func{N: name, F: func(context.Context) (task.Result, error) {
		return task.Result{Changed: changed, Detail: detail}, err
	}}
}

// goldenStart runs start's phase runner over fake tasks, as start does
// when its output is not a terminal (a pipe, or the journal under
// systemd), and returns what it wrote to stdout and stderr.
func goldenStart(t *testing.T, fail bool) (stdout, stderr string) {
	t.Helper()
	l, err := layout.New(t.TempDir(), "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	c := &config.Config{}
	c.Agent.NodeName = "node-1"
	s := NewStart(Options{Layout: l, Config: c, Log: progress.Logger(&errs, slog.LevelInfo), Progress: &out, Now: fakeClock(250 * time.Millisecond)})
	s.events = nil // no cluster here; the Event is tested in internal/events and end to end
	wait := task.Func{N: "wait-node-ready", F: func(context.Context) (task.Result, error) {
		s.nodeProgress("node not visible yet: nodes \"node-1\" not found")
		s.nodeProgress("node Ready=False: container runtime network not ready")
		return task.Result{}, nil
	}}
	var last error
	if fail {
		last = errors.New("write /etc/aks-flex-node/x: read-only file system")
	}
	phases := []task.Phase{
		{Name: "stage", Tasks: []task.Task{fakeTask("stage-node-components", true, "", nil)}},
		{Name: "host", Tasks: []task.Task{fakeTask("create-layout-dirs", true, "", nil), fakeTask("disable-swap", false, "", nil)}},
		{Name: "join", Tasks: []task.Task{wait}},
		{Name: "finish", Tasks: []task.Task{fakeTask("save-state", true, "state.json", nil), fakeTask("write-joined-marker", true, "", last)}},
	}
	_, err = s.runPhases(context.Background(), phases, s.opts.Now())
	if fail != (err != nil) {
		t.Fatalf("runPhases: %v", err)
	}
	return out.String(), errs.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s changed:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

var timeAttr = regexp.MustCompile(`time=\S+ `)

// The output of start and reset where no one watches a terminal is an
// interface: the journal, scripts and `make bench-join` read its lines.
// These goldens pin it byte for byte.
func TestStartOutputGolden(t *testing.T) {
	t.Run("systemd", func(t *testing.T) {
		t.Setenv("INVOCATION_ID", "0123")
		out, errs := goldenStart(t, false)
		checkGolden(t, "start-systemd.golden", "--- stdout\n"+out+"--- stderr\n"+errs)
		out, errs = goldenStart(t, true)
		checkGolden(t, "start-failed-systemd.golden", "--- stdout\n"+out+"--- stderr\n"+errs)
	})
	t.Run("pipe", func(t *testing.T) {
		t.Setenv("INVOCATION_ID", "")
		t.Setenv("JOURNAL_STREAM", "")
		out, errs := goldenStart(t, false)
		// slog stamps each line with the wall clock outside systemd.
		checkGolden(t, "start-pipe.golden", "--- stdout\n"+out+"--- stderr\n"+timeAttr.ReplaceAllString(errs, "time=T "))
	})
}

func TestResetOutputGolden(t *testing.T) {
	t.Setenv("INVOCATION_ID", "0123")
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var errs bytes.Buffer
	run := func(context.Context, string, ...string) ([]byte, error) { return []byte("ActiveState=inactive\n"), nil }
	if _, err := Reset(context.Background(), Options{Layout: l, Log: progress.Logger(&errs, slog.LevelInfo), Exec: run, Now: fakeClock(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "reset-systemd.golden", errs.String())
}

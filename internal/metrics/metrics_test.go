package metrics

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

func testLayout(t *testing.T, withStateDir bool) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if withStateDir {
		if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// scrape serves the registry over HTTP and parses the answer with
// Prometheus' own text parser, as a scraper does.
func scrape(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, rec.Body)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// What commands measure (a join, an upgrade, failed tasks) is served by
// the agent's registry, with the versions the applied state records and
// the agent's own loop measures and repairs.
func TestRegistryServesStoreVersionsAndLoops(t *testing.T) {
	l := testLayout(t, true)
	s := OpenStore(l)
	for _, d := range []time.Duration{25 * time.Second, 40 * time.Second} {
		if err := s.Observe(OpJoin, nil, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Observe(OpUpgrade, map[string]string{"component": "agent", "result": "upgraded"}, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	r := &task.Runner{Log: slog.New(slog.DiscardHandler), Observer: TaskErrors(s)}
	_, _ = r.Serial(context.Background(), task.Func{N: "wait-node-ready", F: func(context.Context) (task.Result, error) { return task.Result{}, errors.New("timeout") }})
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "n", Machine: "kube1", KubernetesVersion: "1.35.4", ContainerdVersion: "1.7.28", ImageDigest: "sha256:abc"}); err != nil {
		t.Fatal(err)
	}

	reg := NewRegistry(l)
	reg.LoopDone("keep-machine", 20*time.Millisecond, nil)
	reg.LoopDone("keep-machine", 30*time.Millisecond, errors.New("machinectl start: unit masked"))
	reg.Repaired("machine-started")
	fams := scrape(t, reg)

	join := fams["aks_flex_node_join_duration_seconds"]
	if join == nil || join.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no join histogram: %v", join)
	}
	h := join.GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 65 {
		t.Errorf("join histogram count %d sum %v, want 2 and 65", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		want := map[float64]uint64{20: 0, 30: 1, 45: 2}[b.GetUpperBound()]
		if (b.GetUpperBound() == 20 || b.GetUpperBound() == 30 || b.GetUpperBound() == 45) && b.GetCumulativeCount() != want {
			t.Errorf("join bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	up := fams["aks_flex_node_upgrade_duration_seconds"].GetMetric()[0]
	if label(up, "component") != "agent" || label(up, "result") != "upgraded" || up.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("upgrade histogram: %v", up)
	}
	info := fams["aks_flex_node_info"].GetMetric()[0]
	if label(info, "kubernetes_version") != "1.35.4" || label(info, "containerd_version") != "1.7.28" || label(info, "worker_image_digest") != "sha256:abc" || info.GetGauge().GetValue() != 1 {
		t.Errorf("info gauge: %v", info)
	}
	errs := map[string]float64{}
	for _, m := range fams["aks_flex_node_task_errors_total"].GetMetric() {
		errs[label(m, "task")] = m.GetCounter().GetValue()
	}
	if errs["wait-node-ready"] != 1 || errs["keep-machine"] != 1 {
		t.Errorf("task errors: %v", errs)
	}
	if c := fams["aks_flex_node_repairs_total"].GetMetric()[0]; label(c, "kind") != "machine-started" || c.GetCounter().GetValue() != 1 {
		t.Errorf("repairs: %v", c)
	}
	if g := fams["aks_flex_node_last_successful_reconcile_timestamp_seconds"].GetMetric()[0]; time.Since(time.Unix(int64(g.GetGauge().GetValue()), 0)) > time.Minute {
		t.Errorf("last successful reconcile: %v", g)
	}
	if n := fams["aks_flex_node_reconcile_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("reconcile passes: %d", n)
	}
}

// Counts from several processes at once all land: the store is updated
// under a lock.
func TestStoreConcurrentUpdates(t *testing.T) {
	l := testLayout(t, true)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := OpenStore(l).TaskFailed("t"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	sd, err := OpenStore(l).load()
	if err != nil || sd.TaskErrors["t"] != 20 {
		t.Fatalf("20 concurrent counts: %v %v", sd, err)
	}
	fi, err := os.Stat(l.OnRoot(l.StateDir() + "/" + File))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("store mode: %v %v", fi, err)
	}
}

// Without a state dir (a host not joined, or reset) nothing is recorded
// and nothing is created: reset must leave no store behind.
func TestStoreNeverCreatesTheStateDir(t *testing.T) {
	l := testLayout(t, false)
	if err := OpenStore(l).Observe(OpJoin, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.OnRoot(l.StateDir())); !os.IsNotExist(err) {
		t.Fatalf("the store created the state dir: %v", err)
	}
	// The registry still serves (no join yet, the agent's version).
	fams := scrape(t, NewRegistry(l))
	if _, ok := fams["aks_flex_node_join_duration_seconds"]; ok {
		t.Error("a join histogram without a join")
	}
	if fams["aks_flex_node_info"] == nil {
		t.Error("no info gauge")
	}
}

// A nil registry is a valid "no metrics".
func TestNilRegistry(t *testing.T) {
	var r *Registry
	r.LoopDone("x", time.Second, nil)
	r.Repaired("y")
	r.RolloutSlotsHeld(1)
	r.RolloutPhase("r", "Staged")
}

// The rollout phase is one series at a time; the slots held a gauge.
func TestRolloutMetrics(t *testing.T) {
	reg := NewRegistry(testLayout(t, true))
	reg.RolloutPhase("edge-b", "Staged")
	reg.RolloutPhase("edge-b", "Updating")
	reg.RolloutSlotsHeld(1)
	fams := scrape(t, reg)
	ms := fams["aks_flex_node_rollout_phase"].GetMetric()
	if len(ms) != 1 || label(ms[0], "rollout") != "edge-b" || label(ms[0], "phase") != "Updating" || ms[0].GetGauge().GetValue() != 1 {
		t.Errorf("rollout phase: %v", ms)
	}
	if g := fams["aks_flex_node_rollout_slots_held"].GetMetric()[0].GetGauge().GetValue(); g != 1 {
		t.Errorf("slots held %v", g)
	}
	reg.RolloutPhase("", "")
	if ms := scrape(t, reg)["aks_flex_node_rollout_phase"].GetMetric(); len(ms) != 0 {
		t.Errorf("no rollout, still a phase: %v", ms)
	}
}

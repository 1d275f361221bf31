package day2

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

// get asks the agent's socket for path, reached through the host's root.
func (e *env) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	sock := e.h.Path(agentSocket)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://agent" + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, agentSocket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// health is the part of /healthz the test reads.
type health struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
	Loops  map[string]struct {
		Runs int `json:"runs"`
	} `json:"loops"`
}

// waitHealth polls /healthz until it answers code, and returns the report.
func (e *env) waitHealth(t *testing.T, code int, timeout time.Duration) health {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := e.get(t, "/healthz")
		var h health
		_ = json.Unmarshal(body, &h)
		if got == code && h.Loops["keep-machine"].Runs > 0 {
			t.Logf("/healthz %d: %s", got, strings.Join(strings.Fields(string(body)), " "))
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz is %d after %v, want %d:\n%s", got, timeout, code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (e *env) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := e.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
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

// metricsAfterJoin: the agent reconciles and is healthy; /metrics, read
// with the Prometheus text parser, has the join's histogram with one
// sample and the versions the node runs.
func (e *env) metricsAfterJoin(t *testing.T) {
	e.waitHealth(t, http.StatusOK, time.Minute)
	fams := e.metrics(t)
	join := fams["aks_flex_node_join_duration_seconds"]
	if join == nil || len(join.GetMetric()) == 0 {
		t.Fatalf("no aks_flex_node_join_duration_seconds in /metrics (%d families)", len(fams))
	}
	h := join.GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 {
		t.Errorf("join histogram: %d samples, sum %v; want one join", h.GetSampleCount(), h.GetSampleSum())
	}
	t.Logf("join histogram: %d sample, %.1fs", h.GetSampleCount(), h.GetSampleSum())
	info := fams["aks_flex_node_info"]
	if info == nil || len(info.GetMetric()) == 0 {
		t.Fatal("no aks_flex_node_info in /metrics")
	}
	m := info.GetMetric()[0]
	var labels []string
	for _, l := range m.GetLabel() {
		labels = append(labels, l.GetName()+"="+l.GetValue())
	}
	t.Logf("aks_flex_node_info{%s} %v", strings.Join(labels, ","), m.GetGauge().GetValue())
	if !strings.Contains(strings.Join(labels, ","), "v1.0.0-e2e") || !strings.Contains(strings.Join(labels, ","), "1.35.4") {
		t.Errorf("aks_flex_node_info does not carry the agent's and Kubernetes' versions: %v", labels)
	}
	if fams["aks_flex_node_reconcile_duration_seconds"] == nil {
		t.Error("no reconcile histogram in /metrics")
	}
}

// machineUnit is the node's machine on the host.
const machineUnit = "systemd-nspawn@kube1.service"

// repairAndUnhealthy: the machine stopped behind the agent's back is
// started again by it, counted as a repair and recorded as an Event;
// then, with the machine's unit masked so it cannot start, /healthz
// turns 503 and says why, and is 200 again once it can.
func (e *env) repairAndUnhealthy(t *testing.T) {
	e.h.RunOK(t, "systemctl", "stop", machineUnit)
	e.waitEvent(t, "Repaired", 2*time.Minute)
	var repairs float64
	for _, m := range e.metrics(t)["aks_flex_node_repairs_total"].GetMetric() {
		if label(m, "kind") == "machine-started" {
			repairs = m.GetCounter().GetValue()
		}
	}
	if repairs < 1 {
		t.Errorf("aks_flex_node_repairs_total{kind=machine-started} is %v after a repair", repairs)
	}
	kubetest.WaitReady(e.ctx, t, e.cp.Client, nodeName, 3*time.Minute)

	e.h.RunOK(t, "systemctl", "mask", "--runtime", machineUnit)
	unmasked := false
	unmask := func() {
		if !unmasked {
			unmasked = true
			e.h.RunOK(t, "systemctl", "unmask", "--runtime", machineUnit)
		}
	}
	defer unmask()
	e.h.RunOK(t, "systemctl", "stop", machineUnit)
	h := e.waitHealth(t, http.StatusServiceUnavailable, time.Minute)
	if !strings.Contains(h.Reason, "keep-machine") {
		t.Errorf("503 reason %q does not name the keep-machine loop", h.Reason)
	}
	unmask()
	e.waitHealth(t, http.StatusOK, time.Minute)
}

// Package metrics owns what aks-flex-node measures and how Prometheus reads
// it: the metric names and their buckets, the store in the state dir that
// keeps what commands measure (join, repave and upgrade durations, task
// errors) for the agent to serve, the agent's own measures (its loops'
// durations and last success, repairs by kind), the version info gauge,
// and the /metrics handler.
//
// Every method of a nil *Registry does nothing, so code that reports
// (daemon loops, tasks) needs no check when a test or a command has no
// registry.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// Namespace prefixes every metric name.
const Namespace = "aks_flex_node"

// Operations measured by commands and kept in the Store.
const (
	OpJoin    = "join"
	OpRepave  = "repave"  // label: result (succeeded, rolled-back, failed)
	OpUpgrade = "upgrade" // labels: component (agent, node) and result
)

// operationBuckets are each operation's histogram bounds, in seconds: a
// join takes tens of seconds to minutes, an agent upgrade seconds.
var operationBuckets = map[string][]float64{
	OpJoin:    {5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600},
	OpRepave:  {5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600},
	OpUpgrade: {1, 2, 5, 10, 20, 30, 60, 120, 300},
}

// operationHelp describes each operation's histogram.
var operationHelp = map[string]string{
	OpJoin:    "Time start took to join the node (preflight to joined), for each start that changed the host.",
	OpRepave:  "Time a repave (node upgrade, or a start that repaves) took from its start to its outcome, by result.",
	OpUpgrade: "Time an upgrade took from its start to its outcome, by component and result.",
}

// Registry is the agent's metrics: its own, the Store's and the versions.
type Registry struct {
	reg         *prometheus.Registry
	reconcile   *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	repairs     *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	decision    *prometheus.GaugeVec
	slotsHeld   prometheus.Gauge
	phase       *prometheus.GaugeVec
	store       *Store
	writer      statusWriterMetrics

	mu   sync.Mutex
	seen map[string]bool // loops whose series exist
}

// NewRegistry is the registry of the agent on layout l.
func NewRegistry(l layout.Layout) *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "reconcile_duration_seconds",
			Help:    "Time one pass of an agent loop took (keep-machine, drift repair, ...).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"loop"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "last_successful_reconcile_timestamp_seconds",
			Help: "Unix time of the last pass of an agent loop that succeeded.",
		}, []string{"loop"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "repairs_total",
			Help: "Repairs the agent made to the node, by kind (machine-started, ...).",
		}, []string{"kind"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "machine_goal_decisions_total",
			Help: "Decisions of the follow-machine loop on the AKS Machine's goal, by decision (applied, apply-in-place, repave, hold, ...).",
		}, []string{"decision"}),
		decision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "machine_goal_decision",
			Help: "1, labelled with the follow-machine loop's last decision on the AKS Machine's goal (one series at a time).",
		}, []string{"decision"}),
		slotsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "rollout_slots_held",
			Help: "Slots of a FlexNodeRollout this node holds (0 or 1; a failed node keeps its slot).",
		}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "rollout_phase",
			Help: "1, labelled with the rollout that selects this node and the node's phase in it (Staged, Updating, Updated, Failed, ManagedElsewhere; one series at a time).",
		}, []string{"rollout", "phase"}),
		store: OpenStore(l),
		seen:  map[string]bool{},
	}
	r.writer = newStatusWriterMetrics(r.reg)
	r.reg.MustRegister(r.reconcile, r.lastSuccess, r.repairs, r.decisions, r.decision, r.slotsHeld, r.phase,
		&storeCollector{store: r.store}, &infoCollector{layout: l},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Gatherer is what the registry exposes, for tests that read it directly.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the metrics in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// LoopDone records one pass of agent loop name: its duration, and the
// time of its last success or, on failure, one more error of that loop
// in the store (errors by task).
func (r *Registry) LoopDone(name string, d time.Duration, err error) {
	if r == nil {
		return
	}
	r.reconcile.WithLabelValues(name).Observe(d.Seconds())
	if err == nil {
		r.lastSuccess.WithLabelValues(name).SetToCurrentTime()
		return
	}
	_ = r.store.TaskFailed(name)
}

// Repaired counts one repair of kind (kebab-case: machine-started, ...).
func (r *Registry) Repaired(kind string) {
	if r == nil {
		return
	}
	r.repairs.WithLabelValues(kind).Inc()
}

// MachineDecision records one decision of the follow-machine loop: one
// more of its kind, and it as the last one.
func (r *Registry) MachineDecision(decision string) {
	if r == nil {
		return
	}
	r.decisions.WithLabelValues(decision).Inc()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decision.Reset()
	r.decision.WithLabelValues(decision).Set(1)
}

// RolloutSlotsHeld records how many rollout slots the node holds.
func (r *Registry) RolloutSlotsHeld(n int) {
	if r == nil {
		return
	}
	r.slotsHeld.Set(float64(n))
}

// RolloutPhase records the node's phase in rollout (none when rollout
// is empty: no rollout selects it).
func (r *Registry) RolloutPhase(rollout, phase string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase.Reset()
	if rollout != "" {
		r.phase.WithLabelValues(rollout, phase).Set(1)
	}
}

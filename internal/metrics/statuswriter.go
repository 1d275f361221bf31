package metrics

import "github.com/prometheus/client_golang/prometheus"

// statusWriterMetrics are the rollouts' status writer's (internal/fleet):
// whether this agent is the elected writer, and its status writes.
type statusWriterMetrics struct {
	elected prometheus.Gauge
	writes  *prometheus.CounterVec
}

func newStatusWriterMetrics(reg *prometheus.Registry) statusWriterMetrics {
	m := statusWriterMetrics{
		elected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "fleet_status_writer",
			Help: "1 while this agent is the elected writer of the FlexNodeRollouts' status, else 0.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "fleet_status_writes_total",
			Help: "Writes of a FlexNodeRollout's status by this agent as the elected writer, by result (ok, conflict, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.elected, m.writes)
	return m
}

// StatusWriter records whether this agent is the rollouts' status writer.
func (r *Registry) StatusWriter(elected bool) {
	if r == nil {
		return
	}
	v := 0.0
	if elected {
		v = 1
	}
	r.writer.elected.Set(v)
}

// StatusWritten counts one status write of a rollout, by result.
func (r *Registry) StatusWritten(result string) {
	if r == nil {
		return
	}
	r.writer.writes.WithLabelValues(result).Inc()
}

package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

// storeCollector serves the Store at each scrape: what commands measured
// since the host joined, whichever process measured it.
type storeCollector struct{ store *Store }

var taskErrorsDesc = prometheus.NewDesc(Namespace+"_task_errors_total",
	"Failures of a task of start, reset or agent-upgrade, or of a pass of an agent loop, by task name.", []string{"task"}, nil)

func operationDesc(op string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_"+op+"_duration_seconds", operationHelp[op], labels, nil)
}

// Describe sends nothing: the store's series are known only when read,
// which makes this an unchecked collector.
func (c *storeCollector) Describe(chan<- *prometheus.Desc) {}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	sd, err := c.store.load()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(taskErrorsDesc, err)
		return
	}
	for _, h := range sd.Histograms {
		if len(h.Counts) != len(h.Bounds) {
			continue
		}
		names := make([]string, 0, len(h.Labels))
		for k := range h.Labels {
			names = append(names, k)
		}
		sort.Strings(names)
		values := make([]string, len(names))
		for i, k := range names {
			values[i] = h.Labels[k]
		}
		buckets := make(map[float64]uint64, len(h.Bounds))
		for i, b := range h.Bounds {
			buckets[b] = h.Counts[i]
		}
		m, err := prometheus.NewConstHistogram(operationDesc(h.Name, names), h.Count, h.Sum, buckets, values...)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(operationDesc(h.Name, names), err)
			continue
		}
		ch <- m
	}
	for name, n := range sd.TaskErrors {
		ch <- prometheus.MustNewConstMetric(taskErrorsDesc, prometheus.CounterValue, n, name)
	}
}

// infoCollector is the version info gauge: the running agent's version
// and what the applied state says the node runs, read at each scrape so
// that it follows an upgrade or a repave.
type infoCollector struct{ layout layout.Layout }

var infoDesc = prometheus.NewDesc(Namespace+"_info",
	"Versions on this host: the running agent, and the node's machine, worker image and components as applied. Always 1.",
	[]string{"agent_version", "git_commit", "machine", "kubernetes_version", "containerd_version", "runc_version", "worker_image", "worker_image_digest"}, nil)

func (c *infoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- infoDesc }

func (c *infoCollector) Collect(ch chan<- prometheus.Metric) {
	var a state.Applied
	if s, err := state.Open(c.layout).Applied(); err == nil && s != nil {
		a = *s
	}
	ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1,
		buildinfo.Version, buildinfo.GitCommit, a.Machine, a.KubernetesVersion, a.ContainerdVersion, a.RuncVersion, a.Image, a.ImageDigest)
}

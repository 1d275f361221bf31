package fleetsim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux this runs on).
const clockTicks = 100

// procCPU is the CPU seconds (user + system) process pid has used.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields count from after its ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return (ut + st) / clockTicks, nil
}

// procRSS is process pid's resident memory in MiB.
func procRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// cpuOf is the CPU seconds of each named process.
func cpuOf(pids map[string]int) (map[string]float64, error) {
	out := map[string]float64{}
	for name, pid := range pids {
		s, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}

// serverMetrics are the API server's own figures the simulator reads
// from its /metrics (Prometheus text).
type serverMetrics struct {
	nodeWatches   float64 // apiserver_longrunning_requests, WATCH of nodes
	watches       float64 // every open WATCH
	etcdNodeLists float64 // etcd_requests_total, list operations on Nodes
	cacheLists    float64 // apiserver_cache_list_total of Nodes
}

func scrape(ctx context.Context, cs kubernetes.Interface) (serverMetrics, error) {
	var m serverMetrics
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return m, fmt.Errorf("the API server's /metrics: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		nodes := strings.Contains(labels, `"nodes"`) || strings.Contains(labels, "minions")
		switch {
		case name == "apiserver_longrunning_requests" && strings.Contains(labels, `verb="WATCH"`):
			m.watches += v
			if nodes {
				m.nodeWatches += v
			}
		case name == "etcd_requests_total" && nodes && strings.Contains(labels, `operation="list`):
			m.etcdNodeLists += v
		case name == "apiserver_cache_list_total" && nodes:
			m.cacheLists += v
		}
	}
	return m, nil
}

// restFigures are the fleet's at rest.
type restFigures struct {
	n               int
	seconds         float64
	apiCPU, etcdCPU float64 // cores
	apiRSS, etcdRSS float64 // MiB
	before, after   serverMetrics
	requests        window
	agentRequests   int64 // the agent's loops (not the kubelet's)
	p50, p99        time.Duration
	simRSS, simHeap float64 // the simulator's workers, MiB
	goroutines      int
	workers         int
	load            string // /proc/loadavg at the end of the window
}

// measureRest reads the control plane and the meter over d of rest.
func (f *Fleet) measureRest(ctx context.Context, d time.Duration) (restFigures, error) {
	r := restFigures{n: f.opts.N, workers: len(f.workers)}
	pids := f.cp.PIDs()
	want := map[string]int{"kube-apiserver": pids["kube-apiserver"], "etcd": pids["etcd"]}
	var err error
	if r.before, err = scrape(ctx, f.cp.Client); err != nil {
		return r, err
	}
	c0, err := cpuOf(want)
	if err != nil {
		return r, err
	}
	if err := f.resetMeters(ctx); err != nil {
		return r, err
	}
	begin := time.Now()
	sleep(ctx, d)
	if r.requests, err = f.snapshot(ctx, time.Since(begin).Seconds()); err != nil {
		return r, err
	}
	c1, err := cpuOf(want)
	if err != nil {
		return r, err
	}
	if r.after, err = scrape(ctx, f.cp.Client); err != nil {
		return r, err
	}
	r.seconds = r.requests.seconds
	r.apiCPU = (c1["kube-apiserver"] - c0["kube-apiserver"]) / r.seconds
	r.etcdCPU = (c1["etcd"] - c0["etcd"]) / r.seconds
	if r.apiRSS, err = procRSS(want["kube-apiserver"]); err != nil {
		return r, err
	}
	if r.etcdRSS, err = procRSS(want["etcd"]); err != nil {
		return r, err
	}
	if r.simRSS, r.simHeap, r.goroutines, err = f.memory(ctx); err != nil {
		return r, err
	}
	r.load = loadAvg()
	r.agentRequests = r.requests.total(func(loop string) bool { return loop != "kubelet" })
	r.p50, r.p99 = r.requests.percentile(50), r.requests.percentile(99)
	return r, nil
}

func (r restFigures) String() string {
	perAgentMin := float64(r.agentRequests) / float64(r.n) / (r.seconds / 60)
	return fmt.Sprintf("window=%.0fs cpu apiserver=%.3f etcd=%.3f cores (%.5f per node) rss apiserver=%.0f etcd=%.0f MiB; "+
		"requests=%.1f/s (agent loops %.2f/s = %.2f per agent per minute, kubelet %.1f/s); watches nodes=%.0f all=%.0f; "+
		"latency p50=%s p99=%s; server: etcd node lists +%.0f, watch-cache node lists +%.0f; "+
		"simulator: %d workers rss=%.0f MiB (%.2f MiB per node) heap=%.0f MiB goroutines=%d (%.0f per node); loadavg %s",
		r.seconds, r.apiCPU, r.etcdCPU, (r.apiCPU+r.etcdCPU)/float64(r.n), r.apiRSS, r.etcdRSS,
		float64(r.requests.total(nil))/r.seconds, float64(r.agentRequests)/r.seconds, perAgentMin,
		float64(r.requests.total(func(l string) bool { return l == "kubelet" }))/r.seconds,
		r.after.nodeWatches, r.after.watches, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond),
		r.after.etcdNodeLists-r.before.etcdNodeLists, r.after.cacheLists-r.before.cacheLists,
		r.workers, r.simRSS, r.simRSS/float64(r.n), r.simHeap, r.goroutines, float64(r.goroutines)/float64(r.n), r.load)
}

// loadAvg is the machine's load averages (1, 5, 15 min), as /proc says.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

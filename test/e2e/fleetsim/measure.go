package fleetsim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

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

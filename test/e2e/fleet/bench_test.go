package fleet

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/ignitiontest"
)

// TestFleetBench (make bench-fleet; AKS_FLEX_NODE_BENCH=1) joins N
// ACL-like hosts at the same moment against one control plane, for each
// N of AKS_FLEX_NODE_BENCH_FLEET_N (default 1,2,4,6), each round on a
// lab and a control plane of its own, and prints: the time until all
// Nodes are Ready, the slowest and fastest host's start, the control
// plane's CPU seconds during the join (kube-apiserver, etcd, and the
// controller manager and scheduler apart) and per second while the
// fleet then idles, the routes on each host once they converged, and
// memory: each host's agent RSS, its machine's (the nspawn unit's
// cgroup) and the host's whole (every process in it).
func TestFleetBench(t *testing.T) {
	if os.Getenv("AKS_FLEX_NODE_BENCH") == "" {
		t.Skip("the fleet join benchmark runs with AKS_FLEX_NODE_BENCH=1 (make bench-fleet)")
	}
	ignitiontest.Require(t)
	// 8 needs more inotify instances than root's default 128: each host's
	// systemds, journald, containerd and kubelet take about 18, and the
	// eighth kubelet's cAdvisor fails ("inotify_init: too many open
	// files"). Raise fs.inotify.max_user_instances to go further.
	sizes := []int{1, 2, 4, 6}
	if v := os.Getenv("AKS_FLEX_NODE_BENCH_FLEET_N"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				t.Fatalf("AKS_FLEX_NODE_BENCH_FLEET_N: %q is not a list of host counts", v)
			}
			sizes = append(sizes, n)
		}
	}
	var rows []string
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) { rows = append(rows, benchRound(t, n)) })
	}
	for _, r := range rows {
		t.Log("BENCH fleet-bench " + r)
	}
}

// idleWindow is how long the control plane's CPU is read while the
// joined fleet idles (leases, status updates, the agents' watches).
const idleWindow = 20 * time.Second

// benchRound is one N: boot, install, start all at once, measure.
func benchRound(t *testing.T, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := &fleet{ctx: ctx, labHosts: n}
	f.setUp(t)
	for i := range n {
		s := spec{name: fmt.Sprintf("bench%d-h%d", n, i+1), variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node"}
		m := f.boot(t, s, f.lab.hosts[i])
		m.h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256Hex(t, f.dist+"/aks-flex-node"))
		f.members = append(f.members, m)
	}
	pids := f.cp.PIDs()
	cpu0 := cpuSeconds(t, pids)
	took, errs := make([]time.Duration, n), make([]error, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, m := range f.members {
		wg.Go(func() {
			b := time.Now()
			_, stderr, err := m.h.Run(ctx, m.agent, "start", "--join-timeout", "5m")
			mu.Lock()
			defer mu.Unlock()
			took[i] = time.Since(b)
			if err != nil {
				errs[i] = fmt.Errorf("%s: start: %w\n%s", m.name, err, stderr)
			}
		})
	}
	// A start that failed ends the round at once, naming its error.
	allReady := poll(t, ctx, 8*time.Minute, fmt.Sprintf("all %d Nodes Ready", n), func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return notReady(ctx, f, n)
	})
	cpu1 := cpuSeconds(t, pids)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.checkPodCIDRs(t)
	f.waitRoutes(t, f.members)
	routes, _ := podRoutes(ctx, f.members[0])
	cpu2 := cpuSeconds(t, pids)
	idleBegin := time.Now()
	<-time.After(idleWindow) // a measuring window, not a wait for a state
	cpu3 := cpuSeconds(t, pids)
	idle := time.Since(idleBegin).Seconds()
	var rss, mem, total []string
	for _, m := range f.members {
		rss = append(rss, agentRSS(ctx, m.h))
		mem = append(mem, machineMemory(ctx, m.h))
		total = append(total, hostRSS(ctx, m.h))
	}
	// A Node's size as a list or watch event carries it: what each
	// agent's keep-pod-routes list and watch move per Node.
	nodeJSON, err := f.cp.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + f.members[0].name).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slowest, fastest := took[0], took[0]
	for _, d := range took {
		slowest, fastest = max(slowest, d), min(fastest, d)
	}
	join := cpu1.sub(cpu0)
	return fmt.Sprintf("n=%d all-ready=%v slowest-start=%v fastest-start=%v join-cpu: apiserver=%.1fs etcd=%.1fs (sum %.1fs, %.2fs/node) kcm=%.1fs sched=%.1fs; idle-cpu apiserver+etcd=%.3f s/s (%.4f s/s/node); routes-per-host=%d; agent-rss-MiB=[%s] machine-mem-MiB=[%s] host-rss-MiB=[%s] node-object=%dB",
		n, allReady.Round(time.Millisecond), slowest.Round(time.Millisecond), fastest.Round(time.Millisecond),
		join["kube-apiserver"], join["etcd"], join["kube-apiserver"]+join["etcd"], (join["kube-apiserver"]+join["etcd"])/float64(n),
		join["kube-controller-manager"], join["kube-scheduler"],
		cpu3.sub(cpu2).apiEtcd()/idle, cpu3.sub(cpu2).apiEtcd()/idle/float64(n), len(routes),
		strings.Join(rss, " "), strings.Join(mem, " "), strings.Join(total, " "), len(nodeJSON))
}

// notReady says which of the round's n Nodes are not Ready ("" when all
// are).
func notReady(ctx context.Context, f *fleet, n int) string {
	nodes, err := f.cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	ready := 0
	for _, nd := range nodes.Items {
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < n {
		return fmt.Sprintf("%d of %d Nodes Ready (%d registered)", ready, n, len(nodes.Items))
	}
	return ""
}

// cpu is CPU seconds (user + system) by component.
type cpu map[string]float64

func (c cpu) sub(o cpu) cpu {
	out := cpu{}
	for k, v := range c {
		out[k] = v - o[k]
	}
	return out
}

func (c cpu) apiEtcd() float64 { return c["kube-apiserver"] + c["etcd"] }

// cpuSeconds reads the components' utime + stime from /proc/<pid>/stat
// (fields 14 and 15, in clock ticks of 1/100 s).
func cpuSeconds(t *testing.T, pids map[string]int) cpu {
	out := cpu{}
	for name, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[name] = (ut + st) / 100
	}
	return out
}

// agentRSS is the agent service's resident memory in the host, in MiB.
func agentRSS(ctx context.Context, h *aclhost.Host) string {
	out, _, err := h.Shell(ctx, `pid=$(systemctl show -p MainPID --value aks-flex-node-agent.service); awk '/^VmRSS:/ {printf "%.1f", $2/1024}' /proc/$pid/status`)
	if err != nil || out == "" {
		return "?"
	}
	return out
}

// machineMemory is the machine kube1's memory in MiB: its nspawn unit's
// cgroup memory.current, or where the host's cgroup has no memory
// controller, the sum of the RSS of the processes in that cgroup
// (marked "rss"; shared pages counted in each).
func machineMemory(ctx context.Context, h *aclhost.Host) string {
	out, _, err := h.Shell(ctx, `cg=$(systemctl show -p ControlGroup --value systemd-nspawn@kube1.service)
if [ -n "$cg" ] && [ -r "/sys/fs/cgroup$cg/memory.current" ]; then awk '{printf "%d", $1/1048576}' "/sys/fs/cgroup$cg/memory.current"; exit; fi
for p in /proc/[0-9]*; do grep -qs 'systemd-nspawn@kube1' "$p/cgroup" && awk '/^VmRSS:/ {print $2}' "$p/status" 2>/dev/null; done | awk '{s += $1} END {printf "%drss", s/1024}'`)
	if err != nil || out == "" {
		return "?"
	}
	return out
}

// hostRSS is the sum of the RSS of every process in the host (its
// systemd, the agent, the machine and all in it), in MiB.
func hostRSS(ctx context.Context, h *aclhost.Host) string {
	out, _, err := h.Shell(ctx, `for p in /proc/[0-9]*; do awk '/^VmRSS:/ {print $2}' "$p/status" 2>/dev/null; done | awk '{s += $1} END {printf "%d", s/1024}'`)
	if err != nil || out == "" {
		return "?"
	}
	return out
}

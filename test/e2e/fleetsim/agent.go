package fleetsim

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/state"
)

// simAgent is one node's agent: the daemon's own loop runner
// (daemon.Agent) with the cluster-facing loops the product runs,
// keep-pod-routes (its ip and nft calls answered by a recorder) and
// keep-node-object, over one shared Node informer, each loop's requests
// counted under its name, on a state root of its own.
type simAgent struct {
	node    *simNode
	nodes   *daemon.NodeInformer
	routes  *routeRecorder
	clients map[string]func() (kubeclient.Interface, error)
}

// client is the node's client for loop with policy p: the node's
// credential, the meter's wrapping, and a rate limiter of its own (the
// product shares one per policy per process; here a process is a
// worker of many nodes, and each must be bounded as its own host is).
func (n *simNode) client(m *meter, loop string, p kubeclient.Policy) func() (kubeclient.Interface, error) {
	cfg := rest.CopyConfig(n.cfg)
	cfg.WrapTransport = m.wrap(n.name, loop)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(p.QPS, p.Burst)
	return func() (kubeclient.Interface, error) { return kubeclient.New(cfg, p) }
}

// nodeRoot is node's state root under dir: joined, its applied state
// naming it, as start leaves a host.
func nodeRoot(dir, name string) (layout.Layout, error) {
	l, err := layout.New(filepath.Join(dir, name), "", "")
	if err != nil {
		return l, err
	}
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		return l, err
	}
	if err := os.WriteFile(m, nil, 0o600); err != nil {
		return l, err
	}
	_, err = state.Open(l).SaveApplied(state.Applied{NodeName: name, Machine: layout.MachineBlue})
	return l, err
}

// newAgent is node's agent; run starts it.
func newAgent(dir string, n *simNode, m *meter, withWriter bool) (*simAgent, *daemon.Agent, error) {
	l, err := nodeRoot(dir, n.name)
	if err != nil {
		return nil, nil, err
	}
	a := &simAgent{node: n, routes: &routeRecorder{addr: n.ip}, clients: map[string]func() (kubeclient.Interface, error){
		"node-informer":    n.client(m, "node-informer", kubeclient.Follow),
		"keep-node-object": n.client(m, "keep-node-object", kubeclient.AgentLoop),
	}}
	a.nodes = daemon.NewNodeInformer(a.clients["node-informer"], n.name)
	log := slog.New(slog.DiscardHandler)
	routes := &daemon.PodRouteKeeper{Layout: l, Log: log, Nodes: a.nodes, ClusterPodCIDR: PodCIDR,
		Window: agentInterval, Net: network.Cleaner{Routes: network.Routes{Run: a.routes.run}, HasNft: func() bool { return true }}}
	object := &daemon.NodeObjectKeeper{Keeper: &daemon.MachineKeeper{Layout: l, Log: log}, Nodes: a.nodes, Client: a.clients["keep-node-object"]}
	// Every agent is a candidate for the rollouts' status writer, as in
	// the product; its requests go through one counted client.
	writerCfg := rest.CopyConfig(n.cfg)
	writerCfg.WrapTransport = m.wrap(n.name, "status-writer")
	hc, err := rest.HTTPClientFor(writerCfg)
	if err != nil {
		return nil, nil, err
	}
	writer := &daemon.RolloutStatusWriter{NodeName: n.name, Log: log, HTTPClient: hc, Nodes: a.nodes,
		Config: func() (*rest.Config, error) { return writerCfg, nil }}
	d := &daemon.Agent{Layout: l, Log: log, Interval: agentInterval,
		Loops: []daemon.Loop{daemon.KeepPodRoutes(routes), daemon.KeepNodeObject(object)}}
	if withWriter {
		d.Loops = append(d.Loops, daemon.WriteRolloutStatus(writer))
	}
	return a, d, nil
}

// await is a channel that gets a token once this agent's cache holds
// Node target at InternalIP ip.
func (a *simAgent) await(target, ip string) <-chan struct{} {
	return a.nodes.Subscribe(func(_, cur *corev1.Node) bool {
		return cur.Name == target && internalIP(cur) == ip
	})
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// routeRecorder stands for the host's ip and nft: this node's address on
// 10.1.0.0/16, and the routes keep-pod-routes adds and removes, recorded.
type routeRecorder struct {
	addr string

	mu      sync.Mutex
	routes  map[string]bool
	changes int
}

func (r *routeRecorder) run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = map[string]bool{}
	}
	a := strings.Join(args, " ")
	switch {
	case name == "nft":
		return nil, nil
	case a == "-4 -j addr show":
		return fmt.Appendf(nil, `[{"ifname":"eth0","addr_info":[{"family":"inet","local":%q,"prefixlen":16}]}]`, r.addr), nil
	case a == "-4 -j route show table main":
		return []byte(`[]`), nil
	case a == "-4 -j route show table main proto 217":
		var rs []string
		for k := range r.routes {
			f := strings.Fields(k)
			rs = append(rs, `{"dst":"`+f[0]+`","gateway":"`+f[2]+`","dev":"eth0","metric":`+f[4]+`}`)
		}
		return []byte("[" + strings.Join(rs, ",") + "]"), nil
	case strings.HasPrefix(a, "-4 route add "), strings.HasPrefix(a, "-4 route del "):
		f := args[3:]
		key := f[0] + " via " + f[2] + " metric " + f[len(f)-3]
		if strings.HasPrefix(a, "-4 route add ") {
			r.routes[key] = true
		} else {
			delete(r.routes, key)
		}
		r.changes++
		return nil, nil
	}
	return nil, fmt.Errorf("the simulated host does not run %s %s", name, a)
}

// count is the routes the host has.
func (r *routeRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.routes)
}

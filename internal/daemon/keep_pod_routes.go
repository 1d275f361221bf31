package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/state"
)

// keepPodRoutesLoop names the loop in logs and as the node lock's holder.
const keepPodRoutesLoop = "keep-pod-routes"

// PodRouteKeeper is a bridge-mode node's part of the pod network between
// nodes: routes to every other Node's pod CIDR via its InternalIP
// (network.PodRoutes: the Nodes on this host's subnets), and the
// masquerade of what the pods send outside the pod networks
// (network.MasqTable). It follows the Nodes through a cache the agent
// keeps of them (NodeInformer: listed once from the API server's watch
// cache, then watched): each pass makes the host match the cache, then
// again at each change (a Node added or deleted, a pod CIDR allocated),
// so a change reaches the routes in the time the watch takes to deliver
// it, and the agent's cost on the API server does not grow with its
// passes.
type PodRouteKeeper struct {
	Layout layout.Layout
	Log    *slog.Logger
	// Nodes is the agent's shared Node informer; nil makes one of the
	// keeper's own over Client.
	Nodes *NodeInformer
	// Client is the node's own client (its credential), called for each
	// list and watch; its policy must not cut a watch (kubeclient.Follow).
	// Only read when Nodes is nil.
	Client func() (kubeclient.Interface, error)
	// PodCIDR is networking.podCIDR: this node's range when the config
	// names it (its CNI config uses it then); else the Node's.
	PodCIDR string
	// ClusterPodCIDR is networking.clusterPodCIDR: only pod CIDRs inside
	// it are routed to or spared from the masquerade.
	ClusterPodCIDR string
	// Events records the Nodes refused on this node's Node (nil: none).
	Events *events.Recorder
	// Window is how long a pass follows the cache's changes before the
	// next pass matches the host again.
	Window time.Duration
	// Net changes the host's routes and nft; its zero value runs ip and
	// nft.
	Net network.Cleaner

	applied string            // what the host was last made to match
	refused map[string]string // the Nodes refused last, and why
	changed <-chan struct{}   // a token at each change of what the routes read
}

// KeepPodRoutes is the loop; it needs the API server.
func KeepPodRoutes(k *PodRouteKeeper) Loop {
	return Loop{Name: keepPodRoutesLoop, Run: k.Keep}
}

func (k *PodRouteKeeper) joined() (bool, error) {
	_, err := os.Stat(k.Layout.OnRoot(k.Layout.JoinedMarker()))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// waitJoined waits, up to Window, for the join to finish: the agent
// starts near the end of start, a moment before the joined marker, and a
// pass that gave up at once would leave the routes a whole interval late.
// nil without an error when the host has not joined by then.
func (k *PodRouteKeeper) waitJoined(ctx context.Context) (*state.Applied, error) {
	var a *state.Applied
	err := wait.PollUntilContextTimeout(ctx, time.Second, k.Window, true, func(context.Context) (bool, error) {
		ok, err := k.joined()
		if err != nil || !ok {
			return false, err
		}
		a, err = state.Open(k.Layout).Applied()
		return err == nil && a != nil && a.NodeName != "", err
	})
	if err != nil && ctx.Err() == nil && wait.Interrupted(err) {
		return nil, nil // not joined: the next pass looks again
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Keep is one pass: match the host to the cached Nodes, then again at
// each change the cache delivers, until Window ends. The first pass
// starts the informer unless another loop did (it lives as long as ctx,
// the loop's); no
// pass asks the API server anything itself. A pass still matches on its
// own, the Nodes unchanged, because it reads the host again (ip and nft,
// not the API server): routes or rules removed behind the agent's back
// come back within Window.
func (k *PodRouteKeeper) Keep(ctx context.Context) error {
	a, err := k.waitJoined(ctx)
	if err != nil || a == nil {
		return err
	}
	if k.Nodes == nil {
		k.Nodes = NewNodeInformer(k.Client, a.NodeName)
	}
	if k.changed == nil {
		k.changed = k.Nodes.Subscribe(func(old, cur *corev1.Node) bool {
			// A Node's status is written every few minutes (and the
			// routes' copies then differ only in version): only what
			// the routes read is a change.
			return peerOf(old) != peerOf(cur)
		})
	}
	k.Nodes.Start(ctx)
	if err := k.Nodes.WaitSynced(ctx, keepPodRoutesLoop, max(k.Window, syncWait)); err != nil {
		return err
	}
	k.applied = ""
	if err := k.match(ctx, a.NodeName, k.Nodes.Nodes()); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, k.Window)
	defer cancel()
	for {
		select {
		case <-wctx.Done():
			return nil
		case <-k.changed:
		}
		// A burst (a rollout relabelling Nodes, a relist) is matched
		// once: the Nodes are read after it has settled a moment.
		select {
		case <-wctx.Done():
			return nil // the next pass matches at once
		case <-time.After(changeDebounce):
		}
		select {
		case <-k.changed:
		default:
		}
		if err := k.match(ctx, a.NodeName, k.Nodes.Nodes()); err != nil {
			k.Log.Warn(keepPodRoutesLoop+": will try again at the next change or pass", "error", err)
		}
	}
}

// syncWait is the least a pass waits for the cache's first list: a
// short Window (a test's) must not fail a pass the list needs longer for.
const syncWait = 10 * time.Second

// changeDebounce is how long a change waits for the rest of its burst.
const changeDebounce = 100 * time.Millisecond

// match makes the host's pod routes and masquerade what nodes ask for,
// as far as the config allows (network.PodRoutes): a Node refused is
// neither routed to nor spared from the masquerade. Nothing while this
// node's own pod CIDR is not known yet, or not one the config allows.
func (k *PodRouteKeeper) match(ctx context.Context, self string, nodes map[string]*corev1.Node) error {
	own, _ := netip.ParsePrefix(k.PodCIDR)
	if !own.IsValid() {
		if n := nodes[self]; n != nil {
			own = peerOf(n).PodCIDR
		}
	}
	if !own.IsValid() {
		return nil
	}
	cluster, _ := netip.ParsePrefix(k.ClusterPodCIDR)
	pn := network.PodNet{Cluster: cluster, Own: own}
	if why := pn.CheckOwn(); why != "" {
		k.report(ctx, self, pn, []network.Refusal{{Node: self, Reason: why}})
		return nil
	}
	var peers []network.Peer
	for name, n := range nodes {
		if name != self {
			peers = append(peers, peerOf(n))
		}
	}
	h, err := k.Net.ReadHostNet(ctx)
	if err != nil {
		return err
	}
	plan := network.PodRoutes(pn, peers, h)
	k.report(ctx, self, pn, plan.Refused)
	rules := network.MasqueradeRules(own, plan.Spared())
	key := fmt.Sprint(plan.Routes) + rules
	if key == k.applied {
		return nil
	}
	release, ok, err := lockOrSkip(k.Layout, k.Log, keepPodRoutesLoop)
	if err != nil || !ok {
		return err
	}
	defer release()
	if ok, err := k.joined(); err != nil || !ok { // a reset finished meanwhile
		return err
	}
	changed, err := k.Net.ApplyPodRoutes(ctx, plan.Routes)
	if err != nil {
		return fmt.Errorf("%s: %w", keepPodRoutesLoop, err)
	}
	if err := k.Net.ApplyMasquerade(ctx, rules); err != nil {
		return fmt.Errorf("%s: %w", keepPodRoutesLoop, err)
	}
	k.applied = key
	k.Log.Info(keepPodRoutesLoop+": the pod routes and masquerade match the Nodes", "pod-cidr", own, "cluster-pod-cidr", k.ClusterPodCIDR,
		"routes", len(plan.Routes), "changed", changed, "skipped", plan.Skipped, "refused", len(plan.Refused))
	return nil
}

// report names each Node refused, once per reason: a log line, and a
// Warning Event on this node's Node (the Node authorizer lets a node
// record Events; client-go's correlator bounds their rate). Without
// networking.clusterPodCIDR every pod CIDR is refused: that is the
// config's doing, said in one log line, not an Event per Node.
func (k *PodRouteKeeper) report(ctx context.Context, self string, pn network.PodNet, refused []network.Refusal) {
	seen := make(map[string]string, len(refused))
	var unset []string
	for _, r := range refused {
		seen[r.Node] = r.Reason
		if k.refused[r.Node] == r.Reason {
			continue
		}
		if !pn.Cluster.IsValid() && r.Node != self {
			unset = append(unset, r.Node)
			continue
		}
		k.Log.Warn(keepPodRoutesLoop+": refused a Node's pod network: no route to it, its pod CIDR is not spared from the masquerade", "node", r.Node, "reason", r.Reason)
		_ = k.Events.Warning(ctx, events.ReasonPodCIDRRefused, "Node %s refused: %s; no route to it, its pod CIDR is not spared from the masquerade", r.Node, r.Reason)
	}
	if len(unset) > 0 {
		slices.Sort(unset)
		k.Log.Warn(keepPodRoutesLoop+": networking.clusterPodCIDR is not set: no route to another node's pods; set it to the cluster's pod range (the controller manager's --cluster-cidr)", "nodes", unset)
	}
	k.refused = seen
}

// peerOf is what the routes need of a Node: its first IPv4 pod CIDR and
// its IPv4 InternalIP (invalid when it has none).
func peerOf(n *corev1.Node) network.Peer {
	p := network.Peer{Name: n.Name}
	for _, s := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
		if c, err := netip.ParsePrefix(s); err == nil && c.Addr().Is4() {
			p.PodCIDR = c
			break
		}
	}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Is4() {
			p.InternalIP = ip
			break
		}
	}
	return p
}

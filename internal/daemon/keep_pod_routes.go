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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
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
// (network.MasqTable). It follows the Nodes: each pass lists them, makes
// the host match, then watches them for Window and makes it match again
// at each change (a Node added or deleted, a pod CIDR allocated), so a
// change reaches the routes in the time the watch takes to deliver it.
type PodRouteKeeper struct {
	Layout layout.Layout
	Log    *slog.Logger
	// Client is the node's own client (its credential).
	Client func() (kubeclient.Interface, error)
	// PodCIDR is networking.podCIDR: this node's range when the config
	// names it (its CNI config uses it then); else the Node's.
	PodCIDR string
	// ClusterPodCIDR is networking.clusterPodCIDR: only pod CIDRs inside
	// it are routed to or spared from the masquerade.
	ClusterPodCIDR string
	// Events records the Nodes refused on this node's Node (nil: none).
	Events *events.Recorder
	// Window is how long a pass watches before it lists again.
	Window time.Duration
	// Net changes the host's routes and nft; its zero value runs ip and
	// nft.
	Net network.Cleaner

	applied string            // what the host was last made to match
	refused map[string]string // the Nodes refused last, and why
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

// Keep is one pass: list, match, then watch and match at each change
// until Window ends or the watch does.
func (k *PodRouteKeeper) Keep(ctx context.Context) error {
	a, err := k.waitJoined(ctx)
	if err != nil || a == nil {
		return err
	}
	cs, err := k.Client()
	if err != nil {
		return fmt.Errorf("%s: the node's credential: %w", keepPodRoutesLoop, err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("%s: list Nodes: %w; the node's credential needs ClusterRole %s (`aks-flex-node cluster prepare --bootstrap-token` prints it, bound to group system:nodes)", keepPodRoutesLoop, err, clusterprep.NodeReaderRole)
		}
		return fmt.Errorf("%s: list Nodes: %w", keepPodRoutesLoop, err)
	}
	nodes := map[string]*corev1.Node{}
	for i := range list.Items {
		nodes[list.Items[i].Name] = &list.Items[i]
	}
	k.applied = "" // a fresh list repairs what was changed behind the agent's back
	if err := k.match(ctx, a.NodeName, nodes); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, k.Window)
	defer cancel()
	rv := list.ResourceVersion
	for wctx.Err() == nil {
		if rv, err = k.follow(wctx, cs, rv, a.NodeName, nodes); err != nil {
			return err
		}
	}
	return nil
}

// watchSeconds bounds one watch request below the client's own timeout
// (30s), so the server ends it cleanly and follow opens the next.
const watchSeconds = 25

// follow watches the Nodes from resource version rv until the watch ends,
// matching the host at each change, and returns the last version seen.
func (k *PodRouteKeeper) follow(ctx context.Context, cs kubeclient.Interface, rv, self string, nodes map[string]*corev1.Node) (string, error) {
	secs := int64(watchSeconds)
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &secs})
	if err != nil {
		if ctx.Err() != nil {
			return rv, nil
		}
		return rv, fmt.Errorf("%s: watch Nodes: %w", keepPodRoutesLoop, err)
	}
	defer w.Stop()
	opened := time.Now()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			// The watch ended: open the next from rv, not at once after
			// one that ended as soon as it began.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second - time.Since(opened)):
			}
			return rv, nil
		}
		if ev.Type == watch.Error {
			// Too old a version, say: the next pass lists again.
			return rv, fmt.Errorf("%s: watch Nodes: %w", keepPodRoutesLoop, apierrors.FromObject(ev.Object))
		}
		n, isNode := ev.Object.(*corev1.Node)
		if !isNode {
			continue
		}
		rv = n.ResourceVersion
		switch ev.Type {
		case watch.Deleted:
			delete(nodes, n.Name)
		case watch.Added, watch.Modified:
			nodes[n.Name] = n
		default:
			continue
		}
		if err := k.match(ctx, self, nodes); err != nil {
			k.Log.Warn(keepPodRoutesLoop+": will try again at the next change or pass", "error", err)
		}
	}
}

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

package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// NodeInformer is the agent process's one copy of the Nodes, shared by
// every loop that reads them (keep-pod-routes, keep-node-object,
// follow-machine, follow-rollout's fleet.Agent and the status writer,
// write-rollout-status: it is their fleet.NodeInformer): kept by
// client-go's informer (a reflector), so the agent's cost on the API
// server is one list and one open watch whatever its loops and passes.
// The list is served from the API server's watch cache
// (resourceVersion=0), then one watch at a time from the last version
// seen, bookmarks keeping that version fresh. A watch the server ends
// (its timeoutSeconds, minutes) is opened again from there, never
// re-listed; the informer lists again only when a watch's version has
// expired (410) or after an error, with the reflector's jittered
// exponential backoff (0.8 s doubling to 30 s). Each Node is kept only as
// far as the loops read it (transform): the agent's own Node nearly
// whole, the others' name, UID, routing fields, labels and
// FlexNodeRelease condition (peerNode).
type NodeInformer struct {
	client func() (kubeclient.Interface, error)
	self   string

	mu      sync.Mutex
	lastErr error // the last list or watch request's error, nil once one succeeds
	run     *nodeCache
	subs    []subscriber
}

// subscriber is a loop's channel of changes and which changes it wants;
// done, when set, ends the subscription (Follow).
type subscriber struct {
	ch      chan struct{}
	matters func(old, cur *corev1.Node) bool
	done    <-chan struct{}
}

// NewNodeInformer is the informer over the Nodes as client sees them
// (called for each list and watch, so a credential rotated or a machine
// switched by a repave is used from the next request on; its policy must
// not cut a watch: kubeclient.Follow); self is the agent's own Node. It
// starts with the first loop that needs it (Start).
func NewNodeInformer(client func() (kubeclient.Interface, error), self string) *NodeInformer {
	return &NodeInformer{client: client, self: self}
}

// nodeCache is one run of the informer, until its context ends.
type nodeCache struct {
	store  cache.Store
	synced func() bool
	done   <-chan struct{}
}

// followListTimeout bounds the informer's list of every Node: at a
// thousand Nodes of a kubelet's size (8-10 KB each) on a busy server, a
// 30 s bound cut lists off before they ended, and each informer started
// over, over and over (the fleet simulator, docs/reference/fleet-scale.md).
const followListTimeout = 2 * time.Minute

// followedWatchTimeout is the client's own bound on a watch beyond the
// server's (its TimeoutSeconds): a connection that stalls without the
// server ending the watch is given up, and the informer opens the next.
const followedWatchTimeout = 30 * time.Second

// Start runs the informer until ctx ends, unless it runs already: the
// loops call it at each pass, and the first one's (long-lived) context
// is the informer's.
func (i *NodeInformer) Start(ctx context.Context) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.run != nil && !i.run.stopped() {
		return
	}
	c := &nodeCache{done: ctx.Done()}
	store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &nodeListWatch{client: i.client, record: i.record},
		ObjectType:    &corev1.Node{},
		Transform:     i.transform,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { i.signal(nil, asNode(o)) },
			DeleteFunc: func(o any) { i.signal(asNode(o), nil) },
			UpdateFunc: func(old, cur any) { i.signal(asNode(old), asNode(cur)) },
		},
	})
	c.store, c.synced = store, ctl.HasSynced
	i.run = c
	go ctl.RunWithContext(ctx)
}

func asNode(o any) *corev1.Node {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	n, _ := o.(*corev1.Node)
	return n
}

// Subscribe is a channel that gets a token at each change matters says
// is one (old nil: added; cur nil: deleted); one token stands for any
// number of changes since the last was taken.
func (i *NodeInformer) Subscribe(matters func(old, cur *corev1.Node) bool) <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := subscriber{ch: make(chan struct{}, 1), matters: matters}
	i.subs = append(i.subs, s)
	return s.ch
}

// Follow is Subscribe for as long as ctx lasts: an elected status
// writer's term, a run of the rollout agent. matters is called for every
// update, on the informer's goroutine (it must be quick and may record
// what it sees: the status writer queues its phase-change Events there).
func (i *NodeInformer) Follow(ctx context.Context, matters func(old, cur *corev1.Node) bool) <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	s := subscriber{ch: make(chan struct{}, 1), matters: matters, done: ctx.Done()}
	i.subs = append(i.subs, s)
	return s.ch
}

func (i *NodeInformer) signal(old, cur *corev1.Node) {
	i.mu.Lock()
	// Subscriptions whose context ended are dropped here, at the next
	// change, rather than by a goroutine each.
	subs := i.subs[:0:0]
	for _, s := range i.subs {
		if s.done == nil || !closed(s.done) {
			subs = append(subs, s)
		}
	}
	i.subs = subs
	i.mu.Unlock()
	for _, s := range subs {
		if old == nil || cur == nil || s.matters(old, cur) {
			select {
			case s.ch <- struct{}{}:
			default: // one token is pending: the reader reads everything
			}
		}
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (i *NodeInformer) record(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.lastErr = err
}

func (i *NodeInformer) current() *nodeCache {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.run
}

// stopped says the informer ended with the context it was started with.
func (c *nodeCache) stopped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// WaitSynced waits up to timeout for the first list to be in the cache;
// the error then names what the last request met. loop names the caller.
func (i *NodeInformer) WaitSynced(ctx context.Context, loop string, timeout time.Duration) error {
	c := i.current()
	if c == nil {
		return fmt.Errorf("%s: the Node informer was not started", loop)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return c.synced(), nil
	})
	if err == nil || ctx.Err() != nil {
		return err
	}
	i.mu.Lock()
	last := i.lastErr
	i.mu.Unlock()
	if apierrors.IsForbidden(last) {
		return fmt.Errorf("%s: list Nodes: %w; the node's credential needs ClusterRole %s (`aks-flex-node cluster prepare --bootstrap-token` prints it, bound to group system:nodes)", loop, last, clusterprep.NodeReaderRole)
	}
	if last != nil {
		return fmt.Errorf("%s: list Nodes: not listed after %s: %w (the agent keeps trying, with backoff)", loop, timeout, last)
	}
	return fmt.Errorf("%s: list Nodes: not listed after %s (the agent keeps trying, with backoff)", loop, timeout)
}

// Nodes is the cache's Nodes by name; each is the cache's, not to change.
func (i *NodeInformer) Nodes() map[string]*corev1.Node {
	out := map[string]*corev1.Node{}
	c := i.current()
	if c == nil {
		return out
	}
	for _, o := range c.store.List() {
		if n, ok := o.(*corev1.Node); ok {
			out[n.Name] = n
		}
	}
	return out
}

// List is the cache's Nodes, each the cache's, not to change.
func (i *NodeInformer) List() []*corev1.Node {
	c := i.current()
	if c == nil {
		return nil
	}
	objs := c.store.List()
	out := make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// Node is the cached Node name (the cache's, not to change), and whether
// the cache has it: after WaitSynced, absent means the server has none.
func (i *NodeInformer) Node(name string) (*corev1.Node, bool) {
	c := i.current()
	if c == nil {
		return nil, false
	}
	o, ok, err := c.store.GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	n, ok := o.(*corev1.Node)
	return n, ok
}

// transform keeps of the agent's own Node all but its managed fields and
// image list (the loops read its taints, labels, conditions, cordon and
// boot; the kubelet's image list is the largest part of a Node), and of
// every other Node only what some loop reads of it (peerNode).
func (i *NodeInformer) transform(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok || n.Name != i.self || i.self == "" {
		return peerNode(o)
	}
	out := n.DeepCopy()
	out.ManagedFields, out.Status.Images = nil, nil
	return out, nil
}

// peerNode is what the cache keeps of another node's Node, the union of
// what the loops read of it, no more:
//   - name, UID and version: every reader (the slots judge a holder's
//     Node by its UID);
//   - pod CIDRs and InternalIPs: keep-pod-routes (peerOf, the pod CIDR
//     checks);
//   - labels: the rollouts' node selectors (the rollout agent's peers
//     and maxUnavailable, the status writer's counts);
//   - the FlexNodeRelease condition alone: the other nodes' phases (the
//     agent's slots in use, the status writer's aggregate and Events).
//
// The rest (the kubelet's conditions and images, annotations, managed
// fields, node info) is dropped before it is stored. A kubelet's Node is
// 8-10 KB as JSON (more decoded); what is kept is a few hundred bytes
// (labels most of it), so 5,000 Nodes cost a few megabytes per agent.
func peerNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil // a tombstone (cache.DeletedFinalStateUnknown): kept as it is
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == fleet.ConditionType {
			out.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	return out, nil
}

// nodeListWatch lists and watches the Nodes with the node's credential,
// each request bounded (the client's Follow policy bounds none).
type nodeListWatch struct {
	client func() (kubeclient.Interface, error)
	record func(error)
}

var _ cache.ListerWatcherWithContext = (*nodeListWatch)(nil)

func (lw *nodeListWatch) nodes() (kubeclient.Nodes, error) {
	cs, err := lw.client()
	if err != nil {
		err = fmt.Errorf("the node's credential: %w", err)
		lw.record(err)
		return nil, err
	}
	return cs.CoreV1().Nodes(), nil
}

func (lw *nodeListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	nodes, err := lw.nodes()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, followListTimeout)
	defer cancel()
	list, err := nodes.List(ctx, opts)
	lw.record(err)
	return list, err
}

func (lw *nodeListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	nodes, err := lw.nodes()
	if err != nil {
		return nil, err
	}
	bound := followedWatchTimeout
	if opts.TimeoutSeconds != nil {
		bound += time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	w, err := nodes.Watch(ctx, opts)
	lw.record(err)
	if err != nil {
		cancel()
		return nil, err
	}
	return boundWatch{w, cancel}, nil
}

func (lw *nodeListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *nodeListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps the informer's first request a
// plain list at resourceVersion=0, which every API server answers from
// its watch cache, rather than a streaming list (client-go's
// WatchListClient), which needs the server's WatchList feature and falls
// back to that list where it is off.
func (lw *nodeListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// boundWatch releases the watch's context when the informer stops it.
type boundWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

func (w boundWatch) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// nodeClientFor is the node's client with policy p: its credential read
// from the active machine at each call (a repave switches the machine).
func nodeClientFor(c *config.Config, l layout.Layout, p kubeclient.Policy) func() (kubeclient.Interface, error) {
	return func() (kubeclient.Interface, error) {
		cfg, err := node.ClientConfig(c, l, l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())))
		if err != nil {
			return nil, err
		}
		return kubeclient.New(cfg, p)
	}
}

// Get is the cached Node name as a copy, or NotFound: the informer as a
// reader of single Nodes (fleet.NodeGetter: the slots judge a holder's
// Node this way, without a request of their own).
func (i *NodeInformer) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	n, ok := i.Node(name)
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return n.DeepCopy(), nil
}

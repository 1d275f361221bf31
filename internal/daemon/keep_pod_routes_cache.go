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
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// nodeCache is the agent's copy of the Nodes, kept by client-go's
// informer (a reflector): one list served from the API server's watch
// cache (resourceVersion=0), then one watch at a time from the last
// version seen, bookmarks keeping that version fresh. A watch the server
// ends (its timeoutSeconds, minutes) is opened again from there, never
// re-listed; the informer lists again only when a watch's version has
// expired (410) or after an error, with the reflector's jittered
// exponential backoff (0.8 s doubling to 30 s). Each Node is kept only
// as far as the routes need it (podRouteNode). changed gets a token at
// every change that matters to the routes.
type nodeCache struct {
	store   cache.Store
	synced  func() bool
	changed chan struct{}
	done    <-chan struct{}

	mu      sync.Mutex
	lastErr error // the last list or watch request's error, nil once one succeeds
}

// followedWatchTimeout is the client's own bound on a watch beyond the
// server's (its TimeoutSeconds): a connection that stalls without the
// server ending the watch is given up, and the informer opens the next.
const followedWatchTimeout = 30 * time.Second

// startNodeCache starts the informer until ctx ends; client is called for
// each list and watch, so a credential rotated or a machine switched by a
// repave is used from the next request on.
func startNodeCache(ctx context.Context, client func() (kubeclient.Interface, error)) *nodeCache {
	c := &nodeCache{changed: make(chan struct{}, 1), done: ctx.Done()}
	store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &nodeListWatch{client: client, record: c.record},
		ObjectType:    &corev1.Node{},
		Transform:     podRouteNode,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.signal() },
			DeleteFunc: func(any) { c.signal() },
			UpdateFunc: func(old, cur any) {
				// A Node's status is written every few minutes (and
				// the stripped copies then differ only in version):
				// only what the routes read is a change.
				o, ok1 := old.(*corev1.Node)
				n, ok2 := cur.(*corev1.Node)
				if !ok1 || !ok2 || peerOf(o) != peerOf(n) {
					c.signal()
				}
			},
		},
	})
	c.store, c.synced = store, ctl.HasSynced
	go ctl.RunWithContext(ctx)
	return c
}

func (c *nodeCache) signal() {
	select {
	case c.changed <- struct{}{}:
	default: // one token is pending: the match it brings reads everything
	}
}

func (c *nodeCache) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
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

// waitSynced waits up to timeout for the first list to be in the cache;
// the error then names what the last request met.
func (c *nodeCache) waitSynced(ctx context.Context, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return c.synced(), nil
	})
	if err == nil || ctx.Err() != nil {
		return err
	}
	c.mu.Lock()
	last := c.lastErr
	c.mu.Unlock()
	if apierrors.IsForbidden(last) {
		return fmt.Errorf("%s: list Nodes: %w; the node's credential needs ClusterRole %s (`aks-flex-node cluster prepare --bootstrap-token` prints it, bound to group system:nodes)", keepPodRoutesLoop, last, clusterprep.NodeReaderRole)
	}
	if last != nil {
		return fmt.Errorf("%s: list Nodes: not listed after %s: %w (the agent keeps trying, with backoff)", keepPodRoutesLoop, timeout, last)
	}
	return fmt.Errorf("%s: list Nodes: not listed after %s (the agent keeps trying, with backoff)", keepPodRoutesLoop, timeout)
}

// nodes is the cache's Nodes by name; each is the cache's, not to change.
func (c *nodeCache) nodes() map[string]*corev1.Node {
	out := map[string]*corev1.Node{}
	for _, o := range c.store.List() {
		if n, ok := o.(*corev1.Node); ok {
			out[n.Name] = n
		}
	}
	return out
}

// podRouteNode is what the cache keeps of a Node: its name, UID and
// version, its pod CIDRs and its InternalIPs, all peerOf and the pod
// CIDR checks read; the rest (status, images, managed fields, labels) is
// dropped before it is stored, so a thousand Nodes cost a few hundred
// kilobytes, not the list's megabytes.
func podRouteNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil // a tombstone (cache.DeletedFinalStateUnknown): kept as it is
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
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
	ctx, cancel := context.WithTimeout(ctx, kubeclient.AgentLoop.Timeout)
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

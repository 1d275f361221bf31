package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// agentCache is the agent's view of the cluster: the rollouts, kept by a
// client-go informer of the agent's (one list from the API server's
// watch cache, resourceVersion 0, then a watch from there; a re-list
// only after a watch's version expired or an error, with the
// reflector's jittered backoff), and the Nodes, read from the process's
// one Node informer (Agent.Nodes), so the agent adds one open watch to
// the process's cost on the API server (DESIGN decision 13). changed
// gets a token at every change that can move this node.
type agentCache struct {
	rollouts cache.Store
	nodes    NodeInformer
	synced   cache.InformerSynced
	changed  chan struct{}

	mu      sync.Mutex
	lastErr error
}

// listWatchTimeout bounds each list the informers make (a watch is bound
// by the server's timeoutSeconds and the informer's context).
const listWatchTimeout = time.Minute

func startAgentCache(ctx context.Context, a *Agent) *agentCache {
	c := &agentCache{changed: make(chan struct{}, 1), nodes: a.Nodes}
	ro, roCtl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				ctx, cancel := context.WithTimeout(ctx, listWatchTimeout)
				defer cancel()
				out, err := a.conn().Rollouts.ListWatch().ListWithContext(ctx, o)
				return out, c.record(err)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := a.conn().Rollouts.ListWatch().WatchWithContext(ctx, o)
				return w, c.record(err)
			},
		},
		ObjectType: &v1alpha1.FlexNodeRollout{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.signal() },
			DeleteFunc: func(any) { c.signal() },
			UpdateFunc: func(old, cur any) {
				// The status writer updates status often: only the spec
				// (its generation) and the resume annotation move a node.
				o, ok1 := old.(*v1alpha1.FlexNodeRollout)
				n, ok2 := cur.(*v1alpha1.FlexNodeRollout)
				if !ok1 || !ok2 || o.Generation != n.Generation || o.Annotations[AnnotationResumedAt] != n.Annotations[AnnotationResumedAt] {
					c.signal()
				}
			},
		},
	})
	changed := a.Nodes.Follow(ctx, func(old, cur *corev1.Node) bool { return nodeKey(old) != nodeKey(cur) })
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				c.signal()
			}
		}
	}()
	c.rollouts, c.synced = ro, roCtl.HasSynced
	go roCtl.RunWithContext(ctx)
	return c
}

func (c *agentCache) signal() {
	select {
	case c.changed <- struct{}{}:
	default: // one pending token: the pass it brings reads everything
	}
}

func (c *agentCache) record(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	return err
}

// waitSynced waits for the rollouts' first list (saying, every minute,
// what the last request met), then for the Nodes'.
func (c *agentCache) waitSynced(ctx context.Context) error {
	for {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return c.synced(), nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			break
		}
		c.mu.Lock()
		last := c.lastErr
		c.mu.Unlock()
		if last != nil {
			// The informer keeps trying with backoff; so does this.
			return fmt.Errorf("list the rollouts: not listed after a minute: %w", last)
		}
	}
	return c.nodes.WaitSynced(ctx, "rollout agent", time.Minute)
}

// nodeKey is what of a Node can move this agent: its UID, cordon, boot,
// labels and FlexNodeRelease condition; a heartbeat of the condition
// (lastHeartbeatTime) is not, nor the kubelet's conditions, which the
// informer keeps of the node's own Node.
func nodeKey(n *corev1.Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v %s %v|", n.UID, n.Spec.Unschedulable, n.Status.NodeInfo.BootID, n.Labels)
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionType {
			b.WriteString(c.Reason + " " + c.Message)
		}
	}
	return b.String()
}

// node is the agent's own Node; nil before it is registered (or before
// the informer saw it).
func (c *agentCache) node(a *Agent) *corev1.Node {
	n, ok := c.nodes.Node(a.NodeName)
	if !ok {
		return nil
	}
	return n
}

func (c *agentCache) allRollouts() []*v1alpha1.FlexNodeRollout {
	var out []*v1alpha1.FlexNodeRollout
	for _, obj := range c.rollouts.List() {
		if r, ok := obj.(*v1alpha1.FlexNodeRollout); ok {
			out = append(out, r)
		}
	}
	return out
}

func (c *agentCache) allNodes() []*corev1.Node { return c.nodes.List() }

// selector is r's node selector; ok is false for one that selects
// nothing the agent can trust (missing or invalid: the CRD refuses both,
// so only a hand-edited object has them).
func selector(r *v1alpha1.FlexNodeRollout) (labels.Selector, bool) {
	if r.Spec.NodeSelector == nil {
		return nil, false
	}
	s, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector)
	return s, err == nil
}

// Select is the rollout that selects Node n (protocol 3): of those whose
// nodeSelector matches its labels, the oldest (creationTimestamp, then
// name); others names the rest, which n says it does not follow.
func Select(rollouts []*v1alpha1.FlexNodeRollout, n *corev1.Node) (chosen *v1alpha1.FlexNodeRollout, others []string) {
	var match []*v1alpha1.FlexNodeRollout
	for _, r := range rollouts {
		if s, ok := selector(r); ok && r.DeletionTimestamp == nil && s.Matches(labels.Set(n.Labels)) {
			match = append(match, r)
		}
	}
	if len(match) == 0 {
		return nil, nil
	}
	slices.SortFunc(match, func(x, y *v1alpha1.FlexNodeRollout) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	for _, r := range match[1:] {
		others = append(others, r.Name)
	}
	return match[0], others
}

// peers counts the Nodes r selects, and names those that report Failed
// at r's generation.
func peers(r *v1alpha1.FlexNodeRollout, nodes []*corev1.Node) (selected int, failed []string) {
	s, ok := selector(r)
	if !ok {
		return 0, nil
	}
	for _, n := range nodes {
		if !s.Matches(labels.Set(n.Labels)) {
			continue
		}
		selected++
		if nr, ok, err := ReadNodeRelease(n); ok && err == nil && nr.Rollout == r.Name && nr.Generation == r.Generation && nr.Phase == PhaseFailed {
			failed = append(failed, n.Name)
		}
	}
	slices.Sort(failed)
	return selected, failed
}

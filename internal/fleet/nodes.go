package fleet

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeInformer is the agent process's one informer over the Nodes, as
// the rollout agent and the status writer read it (issue 31: one list
// from the watch cache and one watch per process, whatever its loops):
// the daemon's NodeInformer, started by its owner for the process's
// life, never by the fleet's parts (an elected writer's term or an
// agent's run is shorter than the loops that share it). The Nodes it
// holds are the informer's, not to change: the node's own nearly whole,
// the others trimmed to their name, UID, labels and FlexNodeRelease
// condition (besides what the other loops keep).
type NodeInformer interface {
	// WaitSynced waits up to timeout for the first list; loop names the
	// caller in its error.
	WaitSynced(ctx context.Context, loop string, timeout time.Duration) error
	// Node is the cached Node name, and whether the cache has it.
	Node(name string) (*corev1.Node, bool)
	// List is every cached Node.
	List() []*corev1.Node
	// Follow is a channel that gets a token at each added or deleted
	// Node and each update matters says is one, until ctx ends; matters
	// runs on the informer's goroutine (quick, and free to note what it
	// sees).
	Follow(ctx context.Context, matters func(old, cur *corev1.Node) bool) <-chan struct{}
}

// cachedNodes is the slots' NodeGetter over the informer: a held slot's
// holder is judged by its cached Node, so an agent waiting for a slot
// asks the API server nothing per holder. A Node the cache does not hold
// is read from the server (fresh): absent means the holder's slot is
// free, and a cache that has not seen a Node registered a moment ago must
// not free a live holder's slot.
type cachedNodes struct {
	informer NodeInformer
	fresh    NodeGetter
}

func (c cachedNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	if c.informer == nil {
		return c.fresh.Get(ctx, name, opts)
	}
	if n, ok := c.informer.Node(name); ok {
		return n.DeepCopy(), nil
	}
	return c.fresh.Get(ctx, name, opts)
}

package fleetsim

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// legacyAgent sends what the agent sent before the shared informer
// (main at 2df1e05, "today" in issue 31), request for request, so the
// simulator measures both on the same control plane: keep-pod-routes
// listed every Node with no resourceVersion at each pass (a quorum read)
// and then watched for the pass's Window (the interval) in 25 s watches,
// passes back to back; keep-node-object got its Node once a pass.
type legacyAgent struct {
	node  *simNode
	pods  func() (kubeclient.Interface, error)
	nodes func() (kubeclient.Interface, error)

	mu      sync.Mutex
	waiters []legacyWaiter
}

type legacyWaiter struct {
	target, ip string
	ch         chan struct{}
}

// legacyWatchSeconds was keep-pod-routes' watch timeout.
const legacyWatchSeconds = 25

func newLegacyAgent(n *simNode, m *meter) *legacyAgent {
	return &legacyAgent{node: n,
		pods:  n.client(m, "keep-pod-routes", kubeclient.AgentLoop),
		nodes: n.client(m, "keep-node-object", kubeclient.AgentLoop)}
}

func (a *legacyAgent) run(ctx context.Context) {
	go wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		cs, err := a.nodes()
		if err == nil {
			_, _ = cs.CoreV1().Nodes().Get(ctx, a.node.name, metav1.GetOptions{})
		}
	}, agentInterval)
	wait.NonSlidingUntilWithContext(ctx, a.podRoutesPass, agentInterval)
}

func (a *legacyAgent) podRoutesPass(ctx context.Context) {
	cs, err := a.pods()
	if err != nil {
		return
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		a.seen(&list.Items[i])
	}
	wctx, cancel := context.WithTimeout(ctx, agentInterval)
	defer cancel()
	rv := list.ResourceVersion
	for wctx.Err() == nil {
		secs := int64(legacyWatchSeconds)
		opened := time.Now()
		w, err := cs.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &secs})
		if err != nil {
			return
		}
		rv = a.follow(wctx, w, rv)
		select {
		case <-wctx.Done():
		case <-time.After(time.Second - time.Since(opened)):
		}
	}
}

func (a *legacyAgent) follow(ctx context.Context, w watch.Interface, rv string) string {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			if n, isNode := ev.Object.(*corev1.Node); isNode {
				rv = n.ResourceVersion
				a.seen(n)
			}
		}
	}
}

func (a *legacyAgent) seen(n *corev1.Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.waiters {
		if w.target == n.Name && internalIP(n) == w.ip {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (a *legacyAgent) await(target, ip string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := make(chan struct{}, 1)
	a.waiters = append(a.waiters, legacyWaiter{target: target, ip: ip, ch: ch})
	return ch
}

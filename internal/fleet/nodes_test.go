package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// testNodes is a NodeInformer for the unit tests, fanning changes out as
// the daemon's NodeInformer does: over a store the test fills
// (storeNodes), or client-go's informer over the fake API's Nodes
// (fakeNodes).
type testNodes struct {
	store  cache.Store
	synced func() bool

	mu   sync.Mutex
	subs []testSub
}

type testSub struct {
	ctx     context.Context
	ch      chan struct{}
	matters func(old, cur *corev1.Node) bool
}

func storeNodes(t *testing.T, nodes ...*corev1.Node) *testNodes {
	t.Helper()
	s := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, n := range nodes {
		if err := s.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return &testNodes{store: s, synced: func() bool { return true }}
}

// fakeNodes follows the Nodes of the server cfg names until the test ends.
func fakeNodes(t *testing.T, cfg *rest.Config) *testNodes {
	t.Helper()
	cf, pc := coreCodecs()
	rc, err := restClientOf(cfg, nil, corev1.SchemeGroupVersion, "/api", cf)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNodes{}
	store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: plainList{&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				out := &corev1.NodeList{}
				return out, rc.Get().Resource("nodes").VersionedParams(&opts, pc).Do(ctx).Into(out)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.Watch = true
				return rc.Get().Resource("nodes").VersionedParams(&opts, pc).Watch(ctx)
			},
		}},
		ObjectType: &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { tn.signal(nil, o.(*corev1.Node)) },
			DeleteFunc: func(any) { tn.signal(nil, nil) },
			UpdateFunc: func(o, c any) { tn.signal(o.(*corev1.Node), c.(*corev1.Node)) },
		},
	})
	tn.store, tn.synced = store, ctl.HasSynced
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ctl.RunWithContext(ctx)
	return tn
}

func (tn *testNodes) signal(old, cur *corev1.Node) {
	tn.mu.Lock()
	subs := tn.subs
	tn.mu.Unlock()
	for _, s := range subs {
		if s.ctx.Err() == nil && (old == nil || cur == nil || s.matters(old, cur)) {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (tn *testNodes) WaitSynced(ctx context.Context, loop string, timeout time.Duration) error {
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return tn.synced(), nil }); err != nil {
		return fmt.Errorf("%s: %w", loop, err)
	}
	return nil
}

func (tn *testNodes) Node(name string) (*corev1.Node, bool) {
	o, ok, err := tn.store.GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	return o.(*corev1.Node), true
}

func (tn *testNodes) List() []*corev1.Node {
	var out []*corev1.Node
	for _, o := range tn.store.List() {
		out = append(out, o.(*corev1.Node))
	}
	return out
}

func (tn *testNodes) Follow(ctx context.Context, matters func(old, cur *corev1.Node) bool) <-chan struct{} {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	s := testSub{ctx: ctx, ch: make(chan struct{}, 1), matters: matters}
	tn.subs = append(tn.subs, s)
	return s.ch
}

// The slots judge a holder by its cached Node; a Node the cache does not
// hold (not seen yet, or gone) is read from the server, so a lagging
// cache never frees a live holder's slot.
func TestCachedNodesAskTheServerOnlyOnAMiss(t *testing.T) {
	cached := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "ua"}}
	fresh := &countingGetter{nodes: map[string]*corev1.Node{"b": {ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "ub"}}}}
	g := cachedNodes{informer: storeNodes(t, cached), fresh: fresh}
	if n, err := g.Get(t.Context(), "a", metav1.GetOptions{}); err != nil || n.UID != "ua" || n == cached {
		t.Errorf("cached a: %v %v (want a copy of the cache's)", n, err)
	}
	if n, err := g.Get(t.Context(), "b", metav1.GetOptions{}); err != nil || n.UID != "ub" {
		t.Errorf("b, not cached yet: %v %v", n, err)
	}
	if fresh.gets != 1 {
		t.Errorf("%d reads from the server, want 1 (b's)", fresh.gets)
	}
}

type countingGetter struct {
	nodes map[string]*corev1.Node
	gets  int
}

func (c *countingGetter) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	c.gets++
	if n, ok := c.nodes[name]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("no %s", name)
}

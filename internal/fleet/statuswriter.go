package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// StatusWriter is the elected agent's work (DESIGN decision 12, fleet
// protocol 6): it follows the rollouts through an informer of its term
// and the Nodes through the process's (each listed once from the watch
// cache, then watched) and writes each
// rollout's status as Aggregate makes it from the Nodes' FlexNodeRelease
// conditions, a compare-and-swap on the rollout's resourceVersion, only
// when it changed; and it records an Event on the rollout for each phase
// change of a node it sees. Changes are coalesced: a round starts a
// moment (Settle) after the first change of a burst and at most once per
// MinInterval, so a thousand nodes reporting at once cost a few writes,
// not a thousand.
type StatusWriter struct {
	rollouts *Rollouts
	core     *coreClient
	// Nodes is the process's Node informer, which its owner started:
	// a term reads it and follows its changes, and starts no informer
	// of Nodes of its own (a candidate taking over costs no list).
	Nodes NodeInformer
	// Identity names this writer in its Events (ReportingInstance).
	Identity string
	Log      *slog.Logger
	// Settle and MinInterval pace the rounds (zero: 200 ms and 2 s).
	Settle, MinInterval time.Duration
	// Wrote, when set, is told the result of each status write: ok,
	// conflict or error (a metric).
	Wrote func(result string)
	// Now is the clock of the conditions' transitions (time.Now when nil).
	Now func() time.Time

	events flowcontrol.RateLimiter
}

// NewStatusWriter is the writer for the server c names, sharing the HTTP
// client hc (nil: one made for c), reading the Nodes from nodes. It needs
// no host: the fleet simulator runs it as is.
func NewStatusWriter(c *rest.Config, hc *http.Client, nodes NodeInformer, identity string, log *slog.Logger) (*StatusWriter, error) {
	ro, err := NewRollouts(c, hc)
	if err != nil {
		return nil, err
	}
	core, err := newCoreClient(c, hc)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StatusWriter{rollouts: ro, core: core, Nodes: nodes, Identity: identity, Log: log}, nil
}

// phaseChange is one node's move from one phase (or none) to another.
type phaseChange struct {
	node     string
	from, to NodeRelease
}

// writerState is what the informers' handlers hand the write loop.
type writerState struct {
	changed chan struct{}
	events  chan *corev1.Event // to the term's sender (sendEvents)

	mu      sync.Mutex
	changes []phaseChange
}

func (s *writerState) signal() {
	select {
	case s.changed <- struct{}{}:
	default: // one is pending: the round it starts reads everything
	}
}

// Run writes until ctx ends (the election's leadership); an error when
// the informers do not sync within a minute (the next election term
// starts afresh).
func (w *StatusWriter) Run(ctx context.Context) error {
	if w.Settle <= 0 {
		w.Settle = 200 * time.Millisecond
	}
	if w.MinInterval <= 0 {
		w.MinInterval = 2 * time.Second
	}
	if w.events == nil {
		// Events are for people reading them: a fleet that moves a
		// thousand nodes at once gets the first hundred and then ten a
		// second, never a flood of the API server.
		w.events = flowcontrol.NewTokenBucketRateLimiter(10, 100)
	}
	if w.Nodes == nil {
		return errors.New("the status writer needs the process's Node informer (StatusWriter.Nodes)")
	}
	st := &writerState{changed: make(chan struct{}, 1), events: make(chan *corev1.Event, eventQueue)}
	go w.sendEvents(ctx, st.events)
	w.followNodes(ctx, st)
	rollouts, rctl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: w.rolloutsListWatch(), ObjectType: &v1alpha1.FlexNodeRollout{},
		// Any change, our own status writes included: a round with
		// nothing to write sends no request.
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { st.signal() }, DeleteFunc: func(any) { st.signal() }, UpdateFunc: func(any, any) { st.signal() },
		},
	})
	go rctl.RunWithContext(ctx)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	synced := cache.WaitForCacheSync(sctx.Done(), rctl.HasSynced) && w.Nodes.WaitSynced(sctx, "status writer", time.Minute) == nil
	cancel()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the Nodes and rollouts were not listed within a minute (can the node's credential list nodes and %s? `aks-flex-node cluster prepare --fleet` grants it)", v1alpha1.Resource)
	}
	w.Log.Info("status writer: following the rollouts and Nodes", "rollouts", len(rollouts.List()), "nodes", len(w.Nodes.List()))
	return w.loop(ctx, st, rollouts)
}

// loop runs a round at once and then after each burst of changes.
func (w *StatusWriter) loop(ctx context.Context, st *writerState, rollouts cache.Store) error {
	for {
		w.round(ctx, st, rollouts)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.MinInterval):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-st.changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.Settle):
		}
		select {
		case <-st.changed: // part of this burst: the round reads it
		default:
		}
	}
}

// round records the phase changes seen since the last round as Events
// and writes every rollout whose status changed.
func (w *StatusWriter) round(ctx context.Context, st *writerState, rollouts cache.Store) {
	st.mu.Lock()
	changes := st.changes
	st.changes = nil
	st.mu.Unlock()
	nodes := w.Nodes.List()
	all := make([]corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		all = append(all, *n)
	}
	byName := map[string]*v1alpha1.FlexNodeRollout{}
	for _, o := range rollouts.List() {
		if r, ok := o.(*v1alpha1.FlexNodeRollout); ok {
			byName[r.Name] = r
			if err := w.write(ctx, r, all); err != nil && ctx.Err() == nil {
				w.Log.Warn("status writer: will write again at the next change", "rollout", r.Name, "error", err)
			}
		}
	}
	w.record(changes, byName, st.events)
}

// write writes r's status when Aggregate says it changed: a
// compare-and-swap; on a conflict (a spec change, another writer's
// write) it reads r again and aggregates again, three times at most.
func (w *StatusWriter) write(ctx context.Context, r *v1alpha1.FlexNodeRollout, nodes []corev1.Node) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	for attempt := 0; ; attempt++ {
		st, err := Aggregate(r, nodes, now())
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(st, r.Status) {
			return nil
		}
		next := r.DeepCopy()
		next.Status = st
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		_, err = w.rollouts.UpdateStatus(wctx, next)
		cancel()
		switch {
		case err == nil:
			w.wrote("ok")
			return nil
		case apierrors.IsNotFound(err):
			return nil // deleted meanwhile
		case !apierrors.IsConflict(err):
			w.wrote("error")
			return fmt.Errorf("write the status of rollout %s: %w", r.Name, err)
		}
		w.wrote("conflict")
		if attempt == 2 {
			return fmt.Errorf("write the status of rollout %s: %w", r.Name, err)
		}
		gctx, cancel := context.WithTimeout(ctx, writeTimeout)
		r, err = w.rollouts.Get(gctx, r.Name)
		cancel()
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read rollout %s again after a conflict: %w", r.Name, err)
		}
	}
}

// writeTimeout bounds one status write or read: a server that does not
// answer must not hold the rounds up (the next change retries).
const writeTimeout = 30 * time.Second

func (w *StatusWriter) wrote(result string) {
	if w.Wrote != nil {
		w.Wrote(result)
	}
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// AnnotationResumedAt is set on a rollout by `fleet resume` (RFC 3339):
// a Failed node retries from stage when it carries another value than
// the one the node last acted on (the protocol's one way to resume).
const AnnotationResumedAt = "flexnode.azure.com/resumed-at"

// The steps a node reports with its phase.
const (
	StepStage  = "stage"
	StepDrain  = "drain"
	StepSwitch = "switch"
	StepSoak   = "soak"
)

// Host is everything the rollout does to the host, so the coordination
// (Agent) is the same for the daemon (lifecycle's repave) and the fleet
// simulator (a stub).
type Host interface {
	// Running says whether the node runs rel already (every field rel
	// sets).
	Running(ctx context.Context, rel v1alpha1.Release) (bool, error)
	// Stage fetches and verifies rel into the inactive side while the
	// node keeps serving. A *StepError names the reason (DiskFull,
	// RegistryUnreachable, ChecksumMismatch, ...).
	Stage(ctx context.Context, rel v1alpha1.Release) error
	// Switch cordons, drains (bounded by drainTimeout) and repaves the
	// node to rel, with the repave's rollback; it may call Progress with
	// the step it is at. A *StepError says where it failed and whether it
	// rolled back (reason RolledBack).
	Switch(ctx context.Context, rel v1alpha1.Release, drainTimeout time.Duration) error
	// Healthy is one soak probe: nil while the node is healthy on the
	// side the last Switch moved it to.
	Healthy(ctx context.Context) error
}

// StepError is a Host's failure: the step it failed in and a CamelCase
// reason, as the Node condition and the failed slot carry them.
type StepError struct {
	Step   string
	Reason string
	Err    error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Reason + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// ErrBusy wraps a Host's error that changed nothing and is worth trying
// again shortly (another command holds the node lock): the node keeps
// its phase and the agent retries, jittered.
var ErrBusy = errors.New("busy")

type progressKey struct{}

// Progress tells the agent running Switch under ctx the step the switch
// is at (drain, switch), so the Node shows it; it does nothing under any
// other context.
func Progress(ctx context.Context, step string) {
	if f, ok := ctx.Value(progressKey{}).(func(string)); ok {
		f(step)
	}
}

// NodeClient is the Nodes as the node's credential reaches them, for
// what the agent writes (its condition, its evidence) and the one read
// the informer cannot answer (a slot holder's Node it does not hold):
// kubeclient's Nodes and client-go's typed client both are one. The
// agent reads every other Node from Agent.Nodes.
type NodeClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// Clients are the API clients the agent works through, made by
// Agent.Connect: once at the start and again after each switch (the
// node's credential lives in the machine that serves).
type Clients struct {
	Nodes    NodeClient
	Rollouts *Rollouts
	Slots    Store
}

// EventRecorder records an Event on the node's Node (*events.Recorder).
type EventRecorder interface {
	Record(ctx context.Context, eventType, reason, message string) error
}

// Metrics is what the agent measures (*metrics.Registry).
type Metrics interface {
	RolloutSlotsHeld(n int)
	RolloutPhase(rollout, phase string)
}

// Agent is one node's part of the fleet's rollouts, with no controller
// (DESIGN decision 12): it follows the rollouts through an informer and
// the Nodes through the process's (a list from the watch cache, then a
// watch; never a timer's re-list), picks the rollout that selects its Node, and moves the node
// through it: compare, stage, take a slot, switch, soak, release;
// reporting each phase on the Node's FlexNodeRelease condition, as an
// Event and in the Record (so a restarted agent resumes where it was).
type Agent struct {
	// NodeName is the node's Node.
	NodeName string
	Host     Host
	// Connect makes the API clients (see Clients).
	Connect func() (Clients, error)
	// Nodes is the process's Node informer (the daemon's NodeInformer),
	// started and kept by its owner; the agent reads every Node from it
	// and asks the server only for its writes.
	Nodes NodeInformer
	// RecordPath is the Record's file (layout.RolloutRecord on the root).
	RecordPath string
	// ManagedElsewhere is a node whose config follows an AKS Machine
	// (in ARM, or through the cluster: config.HasMachine): it reports
	// ManagedElsewhere and never takes a slot.
	ManagedElsewhere bool
	// BootID is the host's boot, for the slot holder; "" takes the
	// Node's status.nodeInfo.bootID (the kubelet's, the host's kernel).
	BootID string
	// SlotTTL is the slots' lease duration; the agent renews at a third
	// of it. 0 means DefaultSlotTTL.
	SlotTTL time.Duration
	// SoakProbe is how often Healthy is asked during the soak; 0 means
	// 5 s (at most a tenth of the soak).
	SoakProbe time.Duration
	// Retry is the wait before trying a slot again when none is free,
	// jittered to 50-150 %; 0 means a third of SlotTTL.
	Retry time.Duration
	// Spread is the most a staged node waits, after a change that may
	// have freed a slot, before it asks for one: a random wait, so a
	// fleet waiting for one slot does not ask all at once (the first
	// one's Updating reaches the others' informers and they do not ask
	// at all). 0 means DefaultSpread; negative, none.
	Spread time.Duration
	Events EventRecorder
	// Metrics may be nil.
	Metrics Metrics
	Log     *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex // guards clients
	clients Clients
	// repMu serialises reports: a Host may call Progress from its own
	// goroutine.
	repMu   sync.Mutex
	cache   *agentCache
	slots   *Slots
	rec     Record
	slot    *Slot // the slot held, while held
	lastLog string
}

// DefaultSpread bounds the random wait before a staged node asks for a
// slot after a change (see Agent.Spread).
const DefaultSpread = 2 * time.Second

// DefaultSlotTTL is a slot's lease: a node that dies holding one frees it
// this long after its last renewal (the agent renews every 20 s).
const DefaultSlotTTL = time.Minute

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now().UTC()
	}
	return time.Now().UTC()
}

func (a *Agent) ttl() time.Duration {
	if a.SlotTTL > 0 {
		return a.SlotTTL
	}
	return DefaultSlotTTL
}

func (a *Agent) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.New(slog.DiscardHandler)
}

// retryAfter is the wait before another Acquire when every slot is held.
// A slot freed by its holder's release shows as that Node's condition
// moving to Updated, which the Node informer delivers at once; a slot
// freed by its holder's death (expiry) or Node deletion shows on no
// object this agent watches (watching the slots would be one more watch
// per agent for a rare event), so the agent also looks again after this
// jittered wait, which keeps a thousand waiting agents from asking in
// lockstep.
func (a *Agent) retryAfter() time.Duration {
	d := a.Retry
	if d <= 0 {
		d = a.ttl() / 3
	}
	return d/2 + rand.N(d+1)
}

func (a *Agent) conn() Clients {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.clients
}

// reconnect makes the clients again (after a switch, the node's
// credential is the other machine's).
func (a *Agent) reconnect() error {
	c, err := a.Connect()
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	a.mu.Lock()
	a.clients = c
	a.mu.Unlock()
	return nil
}

// Run follows the rollouts until ctx ends; it returns ctx's error then,
// or an error that stopped it before it could follow (the first
// connection, the Record).
func (a *Agent) Run(ctx context.Context) error {
	if a.Nodes == nil {
		return errors.New("the rollout agent needs the process's Node informer (Agent.Nodes)")
	}
	if err := a.reconnect(); err != nil {
		return err
	}
	rec, err := loadRecordOrEmpty(a.RecordPath)
	if err != nil {
		return err
	}
	a.rec = rec
	// The informers live as long as this Run: a caller that runs the
	// agent again after an error must not leave them behind.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.cache = startAgentCache(ctx, a)
	if err := a.cache.waitSynced(ctx); err != nil {
		return err
	}
	a.log().Info("rollout: following the FlexNodeRollouts that select this Node", "node", a.NodeName, "phase", rec.Phase, "rollout", rec.Rollout)
	// One retry is pending at a time, at the earliest time a pass asked
	// for: a stream of changes does not keep postponing it (a slot freed
	// by expiry shows on no watched object; only the retry finds it).
	var retryAt time.Time
	fired := false
	for {
		wait := a.pass(ctx, fired)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch now := time.Now(); {
		case wait <= 0:
			retryAt = time.Time{}
		case fired || retryAt.IsZero() || now.Add(wait).Before(retryAt):
			retryAt = now.Add(wait)
		}
		var timer <-chan time.Time
		var t *time.Timer
		if !retryAt.IsZero() {
			t = time.NewTimer(time.Until(retryAt))
			timer = t.C
		}
		fired = false
		select {
		case <-ctx.Done():
		case <-a.cache.changed:
		case <-timer:
			fired, retryAt = true, time.Time{}
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

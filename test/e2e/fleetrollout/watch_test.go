package fleetrollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// nodeWatch is an informer on the Nodes for the length of a rollout:
// every state of every Node it is told about, in order, and the most
// Nodes it ever saw disrupted (unschedulable or not Ready) at once.
type nodeWatch struct {
	stop    chan struct{}
	mu      sync.Mutex
	state   map[string]nodeState
	events  []nodeEvent
	peak    int
	peakAt  time.Time
	peakSet []string
	// readyBeats is, per Node, each Ready=True heartbeat the kubelet
	// posted, in order: the first after a machine stopped is the new
	// kubelet's.
	readyBeats map[string][]time.Time
}

// nodeState is what the watch keeps of one Node.
type nodeState struct {
	Unschedulable bool
	Ready         bool
	Release       fleet.NodeRelease // zero without a FlexNodeRelease condition
}

func (s nodeState) disrupted() bool { return s.Unschedulable || !s.Ready }

// nodeEvent is a Node's state as of one watch event.
type nodeEvent struct {
	At   time.Time
	Node string
	nodeState
}

func watchNodes(t *testing.T, c kubernetes.Interface) *nodeWatch {
	t.Helper()
	w := &nodeWatch{stop: make(chan struct{}), state: map[string]nodeState{}, readyBeats: map[string][]time.Time{}}
	f := informers.NewSharedInformerFactory(c, 0)
	inf := f.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(o) },
		UpdateFunc: func(_, o any) { w.observe(o) },
		DeleteFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				w.mu.Lock()
				delete(w.state, n.Name)
				w.mu.Unlock()
			}
		},
	})
	must(t, err)
	f.Start(w.stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the Node informer did not sync in 1m")
	}
	t.Cleanup(w.close)
	return w
}

func (w *nodeWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
}

func (w *nodeWatch) observe(o any) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	s := nodeState{Unschedulable: n.Spec.Unschedulable}
	var beat time.Time
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.Ready = c.Status == corev1.ConditionTrue
			if s.Ready {
				beat = c.LastHeartbeatTime.Time
			}
		}
	}
	if r, ok, err := fleet.ReadNodeRelease(n); ok && err == nil {
		s.Release = r
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.readyBeats[n.Name]; !beat.IsZero() && (len(b) == 0 || beat.After(b[len(b)-1])) {
		w.readyBeats[n.Name] = append(b, beat)
	}
	if prev, seen := w.state[n.Name]; seen && prev == s {
		return // a heartbeat: nothing the test looks at changed
	}
	w.state[n.Name] = s
	w.events = append(w.events, nodeEvent{At: now, Node: n.Name, nodeState: s})
	var set []string
	for name, st := range w.state {
		if st.disrupted() {
			set = append(set, name)
		}
	}
	if len(set) > w.peak {
		sort.Strings(set)
		w.peak, w.peakAt, w.peakSet = len(set), now, set
	}
}

// maxDisrupted is the most Nodes seen unschedulable or not Ready at once,
// when, and which.
func (w *nodeWatch) maxDisrupted() (int, time.Time, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, w.peakAt, w.peakSet
}

// history is every event seen, in order.
func (w *nodeWatch) history() []nodeEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]nodeEvent(nil), w.events...)
}

// everDisrupted names the Nodes seen unschedulable or not Ready at any
// event after since.
func (w *nodeWatch) everDisrupted(since time.Time) map[string]bool {
	out := map[string]bool{}
	for _, ev := range w.history() {
		if !ev.At.Before(since) && ev.disrupted() {
			out[ev.Node] = true
		}
	}
	return out
}

// timeline is the history as text, for a failure message.
func (w *nodeWatch) timeline(since time.Time) string {
	var b strings.Builder
	for _, ev := range w.history() {
		r := ev.Release
		fmt.Fprintf(&b, "%8.3fs %-10s unschedulable=%-5v ready=%-5v %s/%d %s %s %s\n", ev.At.Sub(since).Seconds(), ev.Node,
			ev.Unschedulable, ev.Ready, r.Rollout, r.Generation, r.Phase, r.Step, r.Reason)
	}
	return b.String()
}

// windows is, per Node, how long it was seen not Ready and how long
// unschedulable after since (summed over the windows seen), and when it
// first reached each phase of rollout at generation gen.
type windows struct {
	NotReady, Unschedulable time.Duration
	Phase                   map[fleet.Phase]time.Time
}

func (w *nodeWatch) windows(since time.Time, rollout string, gen int64) map[string]*windows {
	out := map[string]*windows{}
	last := map[string]nodeEvent{}
	for _, ev := range w.history() {
		o := out[ev.Node]
		if o == nil {
			o = &windows{Phase: map[fleet.Phase]time.Time{}}
			out[ev.Node] = o
		}
		if p, ok := last[ev.Node]; ok && !ev.At.Before(since) {
			from := p.At
			if from.Before(since) {
				from = since
			}
			if !p.Ready {
				o.NotReady += ev.At.Sub(from)
			}
			if p.Unschedulable {
				o.Unschedulable += ev.At.Sub(from)
			}
		}
		last[ev.Node] = ev
		if r := ev.Release; r.Rollout == rollout && r.Generation == gen && !ev.At.Before(since) {
			if _, seen := o.Phase[r.Phase]; !seen {
				o.Phase[r.Phase] = ev.At
			}
		}
	}
	return out
}

// firstReadyAfter is the first Ready=True heartbeat node's kubelet
// posted at or after t (the API server keeps it to the second, so t is
// truncated), zero when none was seen.
func (w *nodeWatch) firstReadyAfter(node string, t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.readyBeats[node] {
		if !b.Before(t.Truncate(time.Second)) {
			return b
		}
	}
	return time.Time{}
}

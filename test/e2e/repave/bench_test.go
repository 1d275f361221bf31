package repave

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// nodeWatch records what the API server says of the Node while a repave
// runs: each update's arrival time and its Ready condition.
type nodeWatch struct {
	mu     sync.Mutex
	events []nodeEvent
	stop   func()
	done   chan struct{}
}

type nodeEvent struct {
	at        time.Time
	ready     corev1.ConditionStatus
	heartbeat time.Time
}

func (e *env) watchNode(t *testing.T) *nodeWatch {
	ctx, cancel := context.WithCancel(e.ctx)
	w, err := e.cp.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", nodeName).String()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	nw := &nodeWatch{stop: func() { cancel(); w.Stop() }, done: make(chan struct{})}
	go func() {
		defer close(nw.done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			r := nodeEvent{at: time.Now()}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					r.ready, r.heartbeat = c.Status, c.LastHeartbeatTime.Time
				}
			}
			nw.mu.Lock()
			nw.events = append(nw.events, r)
			nw.mu.Unlock()
		}
	}()
	return nw
}

// finish stops the watch and returns, from the API server's view, how
// long after stopped the Node was next seen Ready (a heartbeat posted
// after it: the new kubelet), and how long it was seen not Ready at all.
func (nw *nodeWatch) finish(stopped time.Time) (window, notReady time.Duration) {
	nw.stop()
	<-nw.done
	nw.mu.Lock()
	defer nw.mu.Unlock()
	var since time.Time
	window = -1
	for _, ev := range nw.events {
		if ev.ready != corev1.ConditionTrue && since.IsZero() {
			since = ev.at
		}
		if ev.ready == corev1.ConditionTrue && !since.IsZero() {
			notReady += ev.at.Sub(since)
			since = time.Time{}
		}
		// Heartbeats have a second's resolution.
		if window < 0 && ev.ready == corev1.ConditionTrue && ev.at.After(stopped) && !ev.heartbeat.Before(stopped.Truncate(time.Second)) {
			window = ev.at.Sub(stopped)
		}
	}
	return window, notReady
}

var (
	stoppedLine = regexp.MustCompile(`time=(\S+) level=INFO msg=task task=stop-active-machine status=ok changed=\w+ duration=(\S+)`)
	drainLine   = regexp.MustCompile(`task=drain-node status=ok changed=\w+ duration=(\S+)`)
)

// benchFigures reads from node upgrade's log when the old side began to
// stop (the window starts there: its kubelet is going) and how long the
// drain took.
func benchFigures(t *testing.T, log string) (stopped time.Time, drain time.Duration) {
	m := stoppedLine.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no stop-active-machine line in:\n%s", log)
	}
	ended, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatal(err)
	}
	took, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatal(err)
	}
	stopped = ended.Add(-took)
	if d := drainLine.FindStringSubmatch(log); d != nil {
		drain, _ = time.ParseDuration(d[1])
	}
	return stopped, drain
}

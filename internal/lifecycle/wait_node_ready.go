package lifecycle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type waitNodeReady struct {
	machine  Machine
	client   *NodeClient
	nodeName string
	// clusterCNI: networking.mode cluster, where start ends at a
	// registered Node that only lacks the cluster's CNI.
	clusterCNI bool
	timeout    time.Duration
	progress   func(string)
	// began is when this start began: the kubelet's start when systemd
	// does not say.
	began time.Time
}

// WaitNodeReady returns the task that waits, up to timeout, for the Node
// nodeName to be Ready as the kubelet that now runs in m reports it: a
// Ready condition with a heartbeat no older than that kubelet's start
// (systemd's record of it in the machine; when that cannot be read, this
// start's beginning). The Ready a kubelet from before a reset, or before a
// restart, left on the Node does not count; the Ready of a kubelet that
// runs on unchanged (a converged start) does. client is the API server as
// the node sees it (its own credential: a node may read its own Node).
// progress, when set, is told each new state seen. With clusterCNI
// (networking.mode cluster) a fresh NotReady whose only reason is the
// missing network config also ends the wait, and the task says the node
// waits for the cluster's CNI.
func WaitNodeReady(m Machine, client *NodeClient, nodeName string, clusterCNI bool, timeout time.Duration, progress func(string)) task.Task {
	return &waitNodeReady{machine: m, client: client, nodeName: nodeName, clusterCNI: clusterCNI, timeout: timeout, progress: progress, began: time.Now()}
}

func (t *waitNodeReady) Name() string { return "wait-node-ready" }

func (t *waitNodeReady) Do(ctx context.Context) (task.Result, error) {
	cs, err := t.client.Get()
	if err != nil {
		return task.Result{}, err
	}
	started, err := kubeletStarted(ctx, t.machine)
	if err != nil {
		started = t.began
	}
	// Read every 200 ms: this wait is the end of a join, and half the
	// interval is what it adds on average.
	want := readyWant{after: notBefore(started), since: "the kubelet started", poll: 200 * time.Millisecond, clusterCNI: t.clusterCNI}
	awaitingCNI, err := waitReadyAt(ctx, cs, t.nodeName, want, t.timeout, t.progress)
	if err != nil {
		return task.Result{}, fmt.Errorf("%w; %s", err, t.machine.logHint("kubelet"))
	}
	if awaitingCNI {
		return task.Result{Detail: fmt.Sprintf("node %s registered; not Ready until the cluster's CNI writes its config into %s in machine %s (networking.mode cluster)", t.nodeName, node.CNIConfDir, t.machine.Name)}, nil
	}
	return task.Result{}, nil
}

// kubeletStarted is when the kubelet that runs in m started, as systemd
// in the machine recorded it: on the monotonic clock, which a machine
// shares with the host (nspawn gives it no time namespace), so the
// reading does not depend on how systemctl formats wall-clock times.
func kubeletStarted(ctx context.Context, m Machine) (time.Time, error) {
	const prop = "ExecMainStartTimestampMonotonic"
	out, err := m.exec(ctx, "systemctl", "show", node.KubeletUnitName, "-p", prop)
	if err != nil {
		return time.Time{}, err
	}
	now, err := m.monotonicNow()
	if err != nil {
		return time.Time{}, err
	}
	wall := time.Now()
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), prop+"=")
	usec, err := strconv.ParseInt(v, 10, 64)
	if err != nil || usec <= 0 {
		return time.Time{}, fmt.Errorf("kubelet start time: systemctl printed %q", strings.TrimSpace(string(out)))
	}
	ago := now - time.Duration(usec)*time.Microsecond
	if ago < 0 {
		return time.Time{}, fmt.Errorf("kubelet start time: %d us is later than now", usec)
	}
	return wall.Add(-ago), nil
}

// notBefore is the bound a heartbeat must be later than to have been
// posted at or after t. The API server keeps times to the second
// (truncated), so a heartbeat posted in t's second reads as that second:
// it counts. A heartbeat older than t's second does not.
func notBefore(t time.Time) time.Time { return t.Truncate(time.Second).Add(-time.Nanosecond) }

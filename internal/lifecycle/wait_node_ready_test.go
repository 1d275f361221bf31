package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// readyNode is a Node whose Ready condition is status with heartbeat hb,
// kept to the second as the API server keeps it.
func readyNode(status corev1.ConditionStatus, hb time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(hb.Truncate(time.Second)),
		}}},
	}
}

// longUp is the monotonic clock of a host up 30 days: the host's own
// clock moved on by that much, so it runs as the real one does but any
// start a test fakes (an hour ago, a minute ago) lies after its boot,
// however recently this host booted.
func longUp() (time.Duration, error) {
	now, err := hostMonotonic()
	return now + 30*24*time.Hour, err
}

// testMachine is machine kube1 of l, run through run, on the longUp clock.
func testMachine(l layout.Layout, run Runner) Machine {
	m := NewMachine(l, "kube1", run)
	m.monotonic = longUp
	return m
}

// monotonicAt is wall time at on the longUp clock, in microseconds, as
// systemd records a start.
func monotonicAt(t *testing.T, at time.Time) int64 {
	now, err := longUp()
	if err != nil {
		t.Fatal(err)
	}
	return (now - time.Since(at)).Microseconds()
}

// waitReadyTask is wait-node-ready against cs, in a machine whose systemd
// says the kubelet started at started (or fails to say, when zero).
func waitReadyTask(t *testing.T, cs kubernetes.Interface, started time.Time) *waitNodeReady {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		switch {
		case name == "machinectl":
			return []byte("1234\n"), nil
		case name == "nsenter" && strings.Contains(strings.Join(args, " "), "systemctl show kubelet.service -p ExecMainStartTimestampMonotonic"):
			if started.IsZero() {
				return []byte("ExecMainStartTimestampMonotonic=0\n"), nil
			}
			return fmt.Appendf(nil, "ExecMainStartTimestampMonotonic=%d\n", monotonicAt(t, started)), nil
		}
		return nil, errors.New("unexpected " + name + " " + strings.Join(args, " "))
	}
	client := &NodeClient{New: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }}
	return WaitNodeReady(testMachine(l, run), client, "n1", false, 300*time.Millisecond, nil).(*waitNodeReady)
}

// A Ready a kubelet from before this one left on the Node (a reset, then
// start, on a Node that still says Ready) does not count: only a
// heartbeat from the kubelet that runs now, even one in the second it
// started, does.
func TestWaitNodeReadyNeedsTheRunningKubelet(t *testing.T) {
	started := time.Now().Add(-3 * time.Second)
	cs := fake.NewClientset(readyNode(corev1.ConditionTrue, started.Add(-20*time.Second)))
	_, err := waitReadyTask(t, cs, started).Do(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no heartbeat since the kubelet started (Ready=True from before)") {
		t.Fatalf("a stale Ready = %v", err)
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), readyNode(corev1.ConditionFalse, started.Add(time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitReadyTask(t, cs, started).Do(t.Context()); err == nil || !strings.Contains(err.Error(), "node Ready=False") {
		t.Fatalf("the new kubelet's NotReady = %v", err)
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), readyNode(corev1.ConditionTrue, started), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitReadyTask(t, cs, started).Do(t.Context()); err != nil {
		t.Fatalf("the new kubelet's Ready: %v", err)
	}
}

// A converged start leaves the kubelet running: its Ready counts however
// long ago it was posted (a kubelet posts an unchanged status every 5
// minutes only).
func TestWaitNodeReadyConvergedKubelet(t *testing.T) {
	started := time.Now().Add(-time.Hour)
	cs := fake.NewClientset(readyNode(corev1.ConditionTrue, time.Now().Add(-4*time.Minute)))
	if _, err := waitReadyTask(t, cs, started).Do(t.Context()); err != nil {
		t.Fatalf("a running kubelet's Ready: %v", err)
	}
}

// When systemd does not say when the kubelet started, only a heartbeat
// from since this start began counts.
func TestWaitNodeReadyWithoutKubeletStart(t *testing.T) {
	cs := fake.NewClientset(readyNode(corev1.ConditionTrue, time.Now().Add(-4*time.Minute)))
	task := waitReadyTask(t, cs, time.Time{})
	if _, err := task.Do(t.Context()); err == nil || !strings.Contains(err.Error(), "no heartbeat since") {
		t.Fatalf("Ready from before this start = %v", err)
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), readyNode(corev1.ConditionTrue, task.began.Add(time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Do(t.Context()); err != nil {
		t.Fatalf("Ready since this start: %v", err)
	}
}

// The kubelet's NotReady messages, as 1.35 writes them.
const (
	noCNIMessage = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	twoErrors    = "[container runtime status check may not have completed yet, " + noCNIMessage + "]"
)

// In networking.mode cluster, start's wait ends at a fresh NotReady whose
// only reason is the missing network config (the cluster's CNI DaemonSet
// comes to the registered node), and says so; in bridge mode, with any
// other reason, or with a heartbeat from before the kubelet started, it
// waits for Ready.
func TestWaitReadyAtClusterCNI(t *testing.T) {
	started := time.Now().Add(-3 * time.Second)
	cases := []struct {
		name        string
		status      corev1.ConditionStatus
		msg         string
		heartbeat   time.Time
		clusterCNI  bool
		wantAwaited bool
		wantErr     bool
	}{
		{"ready", corev1.ConditionTrue, "kubelet is posting ready status", started.Add(time.Second), false, false, false},
		{"cluster mode, ready", corev1.ConditionTrue, "kubelet is posting ready status", started.Add(time.Second), true, false, false},
		{"cluster mode, no CNI config", corev1.ConditionFalse, noCNIMessage, started.Add(time.Second), true, true, false},
		{"cluster mode, no CNI config from before", corev1.ConditionFalse, noCNIMessage, started.Add(-20 * time.Second), true, false, true},
		{"bridge mode, no CNI config", corev1.ConditionFalse, noCNIMessage, started.Add(time.Second), false, false, true},
		{"cluster mode, another error too", corev1.ConditionFalse, twoErrors, started.Add(time.Second), true, false, true},
		{"cluster mode, another reason", corev1.ConditionFalse, "PLEG is not healthy: pleg was last seen active 3m0s ago", started.Add(time.Second), true, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := readyNode(c.status, c.heartbeat)
			n.Status.Conditions[0].Message = c.msg
			want := readyWant{after: notBefore(started), since: "the kubelet started", poll: 20 * time.Millisecond, clusterCNI: c.clusterCNI}
			awaited, err := waitReadyAt(t.Context(), kubeclienttest.Wrap(fake.NewClientset(n)), "n1", want, 300*time.Millisecond, nil)
			if awaited != c.wantAwaited || (err != nil) != c.wantErr {
				t.Fatalf("awaited %v, err %v; want awaited %v, error %v", awaited, err, c.wantAwaited, c.wantErr)
			}
			if c.wantErr && c.heartbeat.After(started) && !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say what was last seen (%q)", err, c.msg)
			}
		})
	}
}

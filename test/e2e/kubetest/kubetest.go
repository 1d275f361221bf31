// Package kubetest holds the cluster-side checks end-to-end tests share:
// waiting for a Node to be Ready and running a pod on it, both bounded.
package kubetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WaitReady waits up to timeout for node to report Ready and fails t if it
// does not.
func WaitReady(ctx context.Context, t testing.TB, c kubernetes.Interface, node string, timeout time.Duration) {
	t.Helper()
	WaitReadySince(ctx, t, c, node, time.Time{}, timeout)
}

// WaitReadySince is WaitReady for a Ready posted at or after since (the
// API server keeps heartbeats to the second): a Ready a kubelet from
// before since left on the Node (a reset, then start) does not count.
// since is this machine's clock, which the kubelets under test share.
func WaitReadySince(ctx context.Context, t testing.TB, c kubernetes.Interface, node string, since time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "not registered"
	for time.Now().Before(deadline) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, cond := range n.Status.Conditions {
				if cond.Type != corev1.NodeReady {
					continue
				}
				last = fmt.Sprintf("Ready=%s: %s", cond.Status, cond.Message)
				if cond.LastHeartbeatTime.Before(&metav1.Time{Time: since.Truncate(time.Second)}) {
					last += fmt.Sprintf(" (heartbeat %s, before %s)", cond.LastHeartbeatTime.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
					continue
				}
				if cond.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s: %v (last: %s)", node, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("node %s not Ready after %v (last: %s)", node, timeout, last)
}

// RunPod runs a pod with one container of image (never pulled: the node has
// it) and command on node, waits up to timeout for it to succeed, and returns
// its logs as the API server serves them.
func RunPod(ctx context.Context, t testing.TB, c kubernetes.Interface, node, name, image string, command []string, timeout time.Duration) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Command: command,
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	var phase corev1.PodPhase
	for time.Now().Before(deadline) && phase != corev1.PodSucceeded {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			phase = p.Status.Phase
			if phase == corev1.PodFailed {
				t.Fatalf("pod %s failed: %+v", name, p.Status)
			}
		}
		if phase != corev1.PodSucceeded {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if phase != corev1.PodSucceeded {
		var events []string
		if evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); err == nil {
			for _, e := range evs.Items {
				events = append(events, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
			}
		}
		t.Fatalf("pod %s is %q after %v\nevents:\n%s", name, phase, timeout, strings.Join(events, "\n"))
	}
	b, err := c.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("pod %s logs through the API server: %v", name, err)
	}
	return string(b)
}

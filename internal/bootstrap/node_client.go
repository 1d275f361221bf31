package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// NodeClient is the API server as the node sees it (its own credential),
// made on first use: a repave's tasks read it from the side that joined,
// which stays on disk after it stops.
type NodeClient struct {
	New  func() (kubeclient.Interface, error)
	once sync.Once
	cs   kubeclient.Interface
	err  error
}

// Get returns the client, made once.
func (n *NodeClient) Get() (kubeclient.Interface, error) {
	n.once.Do(func() { n.cs, n.err = n.New() })
	return n.cs, n.err
}

// readyHeartbeat is the last heartbeat of the Node's Ready condition (zero
// when it has none): a wait for the new side looks for a later one.
func readyHeartbeat(ctx context.Context, cs kubeclient.Interface, name string) (time.Time, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time, nil
		}
	}
	return time.Time{}, nil
}

// sameVersion compares Kubernetes versions with or without their "v".
func sameVersion(a, b string) bool { return strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v") }

// waitReadyAt polls, up to timeout, until the Node is Ready at kubelet
// version v with a heartbeat after after: posted by a kubelet that
// started since, not the Ready the stopped one left behind.
func waitReadyAt(ctx context.Context, cs kubeclient.Interface, name, v string, after time.Time, timeout time.Duration, progress func(string)) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		status := ""
		done := false
		switch {
		case err != nil && last != "" && nearBound(ctx):
			return false, nil // the bound itself; keep what was last seen
		case err != nil:
			status = "node not readable: " + err.Error()
		case !sameVersion(n.Status.NodeInfo.KubeletVersion, v):
			status = "kubelet " + n.Status.NodeInfo.KubeletVersion + " reported, waiting for " + v
		default:
			status = "kubelet " + v + " reported, not Ready"
			for _, c := range n.Status.Conditions {
				if c.Type != corev1.NodeReady {
					continue
				}
				if !c.LastHeartbeatTime.After(after) {
					status = "kubelet " + v + " reported, no heartbeat since the switch"
					break
				}
				done = c.Status == corev1.ConditionTrue
				status = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
			}
		}
		if status != last && progress != nil {
			progress(status)
		}
		last = status
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready at kubelet %s within %v (last seen: %s)", name, v, timeout, last)
	}
	return nil
}

// nearBound: ctx has ended or ends within a second, when a request fails
// for the bound (the client's rate limiter refuses a wait past it) rather
// than for what it asked.
func nearBound(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && time.Until(dl) < time.Second
}

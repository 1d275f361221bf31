package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
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

// nodeClientFor is the API server as the node whose machine rootfs is
// root() sees it (node.ClientConfig: the kubelet's credential, or the
// config's Azure identity), made on first use.
func nodeClientFor(c *config.Config, l layout.Layout, root func() string) *NodeClient {
	return &NodeClient{New: func() (kubeclient.Interface, error) {
		cfg, err := node.ClientConfig(c, l, root())
		if err != nil {
			return nil, err
		}
		return kubeclient.New(cfg, kubeclient.Step)
	}}
}

// Get returns the client, made once.
func (n *NodeClient) Get() (kubeclient.Interface, error) {
	n.once.Do(func() { n.cs, n.err = n.New() })
	return n.cs, n.err
}

// readyHeartbeat is the last heartbeat of the Node's Ready condition (zero
// when it has none): a wait for the new side looks for a later one.
func readyHeartbeat(ctx context.Context, cs kubeclient.Interface, name string) (time.Time, error) {
	// Fresh (no resourceVersion): a stale heartbeat as the mark would let
	// the old kubelet's last Ready pass for the new side's.
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

// readyWant is what a wait for the Node's Ready asks beyond Ready=True:
// the kubelet version (any when ""), and a heartbeat later than after,
// which is when since happened ("the switch", "the kubelet started").
type readyWant struct {
	version string
	after   time.Time
	since   string
	// poll is how often the Node is read; 0 is every 500 ms.
	poll time.Duration
	// clusterCNI (networking.mode cluster) also ends the wait at a fresh
	// NotReady whose only reason is the missing network config: the
	// cluster's CNI DaemonSet comes to a registered node and writes it.
	clusterCNI bool
}

// waitReadyAt polls, up to timeout, until the Node is Ready as want asks:
// at want's kubelet version, with a heartbeat after want.after, posted by
// a kubelet that runs since then, not the Ready one that stopped left
// behind. wait-node-ready (start) and wait-node-version (repave) both
// wait this way. awaitingCNI says the wait ended on want.clusterCNI's
// NotReady rather than on Ready.
func waitReadyAt(ctx context.Context, cs kubeclient.Interface, name string, want readyWant, timeout time.Duration, progress func(string)) (awaitingCNI bool, err error) {
	last, poll := "", want.poll
	if poll == 0 {
		poll = 500 * time.Millisecond
	}
	err = pollJittered(ctx, poll, timeout, func(ctx context.Context) (bool, error) {
		// Any version will do (resourceVersion 0: the API server's watch
		// cache, or the agent's own informer, daemon.cachedReads): a
		// stale answer only delays the wait, and want.after (a fresh
		// read) keeps the old kubelet's Ready from passing.
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
		status, done := "", false
		switch {
		case err != nil && last != "" && nearBound(ctx):
			return false, nil // the bound itself; keep what was last seen
		case err != nil:
			status = "node not readable: " + err.Error()
		case want.version != "" && !sameVersion(n.Status.NodeInfo.KubeletVersion, want.version):
			status = "kubelet " + n.Status.NodeInfo.KubeletVersion + " reported, waiting for " + want.version
		default:
			done, awaitingCNI, status = readySince(n, want)
		}
		if status != last && progress != nil {
			progress(status)
		}
		last = status
		return done, nil
	})
	if err == nil {
		return awaitingCNI, nil
	}
	if want.version == "" {
		return false, fmt.Errorf("node %s not Ready within %v (last seen: %s)", name, timeout, last)
	}
	return false, fmt.Errorf("node %s not Ready at kubelet %s within %v (last seen: %s)", name, want.version, timeout, last)
}

// readySince says whether n's Ready condition is True with a heartbeat
// after want.after (or, with want.clusterCNI, False only for the missing
// network config: awaitingCNI), and what was seen.
func readySince(n *corev1.Node, want readyWant) (done, awaitingCNI bool, status string) {
	reported := "node registered"
	if want.version != "" {
		reported = "kubelet " + want.version + " reported"
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if !c.LastHeartbeatTime.After(want.after) {
			return false, false, fmt.Sprintf("%s, no heartbeat since %s (Ready=%s from before)", reported, want.since, c.Status)
		}
		status := fmt.Sprintf("node Ready=%s: %s", c.Status, c.Message)
		if c.Status != corev1.ConditionTrue && want.clusterCNI && NetworkNotReady(c.Message) {
			return true, true, status
		}
		return c.Status == corev1.ConditionTrue, false, status
	}
	return false, false, reported + ", not Ready"
}

// NetworkNotReady says a NotReady message is the kubelet's for a
// container runtime with no network config yet, and nothing else: the
// kubelet's runtime-network error ("container runtime network not ready:
// NetworkReady=false reason:NetworkPluginNotReady ...") is the whole
// message; with other errors it lists them all in brackets.
func NetworkNotReady(msg string) bool {
	return strings.HasPrefix(msg, "container runtime network not ready: NetworkReady=false")
}

// nearBound: ctx has ended or ends within a second, when a request fails
// for the bound (the client's rate limiter refuses a wait past it) rather
// than for what it asked.
func nearBound(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && time.Until(dl) < time.Second
}

package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type waitNodeReady struct {
	machine  Machine
	config   *config.Config
	nodeName string
	timeout  time.Duration
	progress func(string)
}

// WaitNodeReady returns the task that waits, up to timeout, for the Node
// agent.nodeName to be Ready, asking the API server with the kubelet's own
// credentials (a node may read its own Node object): its client
// certificate, or with an Azure identity a token for that identity.
// progress, when set, is told each new state seen.
func WaitNodeReady(m Machine, c *config.Config, timeout time.Duration, progress func(string)) task.Task {
	return &waitNodeReady{machine: m, config: c, nodeName: c.Agent.NodeName, timeout: timeout, progress: progress}
}

func (t *waitNodeReady) Name() string { return "wait-node-ready" }

func (t *waitNodeReady) Do(ctx context.Context) (task.Result, error) {
	kc, err := node.ClientConfig(t.config, t.machine.Layout, t.machine.Root())
	if err != nil {
		return task.Result{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	clusterCNI := t.config.Networking.ClusterCNI()
	awaited, err := pollNodeReady(wctx, kc, t.nodeName, clusterCNI, t.progress)
	if err != nil {
		return task.Result{}, fmt.Errorf("node %s not Ready within %v: %w; %s", t.nodeName, t.timeout, err, t.machine.logHint("kubelet"))
	}
	if awaited {
		return task.Result{Detail: fmt.Sprintf("node %s registered; not Ready until the cluster's CNI writes its config into %s in machine %s (networking.mode cluster)", t.nodeName, node.CNIConfDir, t.machine.Name)}, nil
	}
	return task.Result{}, nil
}

// NetworkNotReady says a NotReady message is the kubelet's for a
// container runtime with no network config yet, and nothing else: the
// kubelet's runtime-network error ("container runtime network not ready:
// NetworkReady=false reason:NetworkPluginNotReady ...") is the whole
// message; with other errors it lists them all in brackets.
func NetworkNotReady(msg string) bool {
	return strings.HasPrefix(msg, "container runtime network not ready: NetworkReady=false")
}

// pollNodeReady polls the Node until its Ready condition is True or ctx
// ends. With clusterCNI, a registered Node whose only reason for NotReady
// is the missing network config also ends the wait (awaited): the
// cluster's CNI DaemonSet is scheduled onto the node once it exists, and
// writes the config when its pod runs, which start need not wait for.
func pollNodeReady(ctx context.Context, cfg *rest.Config, nodeName string, clusterCNI bool, progress func(string)) (awaited bool, err error) {
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	last, seen := "", false
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		status := ""
		switch {
		case err != nil && seen:
			// A request can fail near the bound (the client's rate
			// limiter refuses a wait past the deadline): what the Node
			// said before is still the news.
			return false, nil
		case err != nil:
			status = "node not visible yet: " + err.Error()
		default:
			seen = true
			status = "node registered, not Ready"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return true, nil
					}
					if clusterCNI && NetworkNotReady(c.Message) {
						awaited = true
						return true, nil
					}
					status = fmt.Sprintf("node Ready=%s: %s", c.Status, c.Message)
				}
			}
		}
		if status != last && progress != nil {
			progress(status)
			last = status
		}
		return false, nil
	})
	if err != nil {
		return false, fmt.Errorf("%w (last seen: %s)", err, last)
	}
	return awaited, nil
}

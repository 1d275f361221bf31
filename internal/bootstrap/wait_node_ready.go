package bootstrap

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
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
	if err := pollNodeReady(wctx, kc, t.nodeName, t.progress); err != nil {
		return task.Result{}, fmt.Errorf("node %s not Ready within %v: %w; %s", t.nodeName, t.timeout, err, t.machine.logHint("kubelet"))
	}
	return task.Result{}, nil
}

// pollNodeReady polls the Node until its Ready condition is True or ctx
// ends.
func pollNodeReady(ctx context.Context, cfg *rest.Config, nodeName string, progress func(string)) error {
	cfg.Timeout = 10 * time.Second
	cs, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	last := ""
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		status := ""
		switch {
		case err != nil:
			status = "node not visible yet: " + err.Error()
		default:
			status = "node registered, not Ready"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
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
		return fmt.Errorf("%w (last seen: %s)", err, last)
	}
	return nil
}

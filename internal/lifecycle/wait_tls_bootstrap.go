package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type waitTLSBootstrap struct {
	machine Machine
	timeout time.Duration
	with    string
}

// WaitTLSBootstrap returns the task that waits, up to timeout, for the
// kubelet's TLS bootstrap to finish: the kubelet writes its kubeconfig
// early, and the bootstrap is done when the issued client certificate is
// in place. A node that joins with an Azure identity bootstraps the same
// way, the identity's token asking for the certificate, so that the
// kubelet and the agent act as the node and nothing more.
func WaitTLSBootstrap(m Machine, c *config.Config, timeout time.Duration) task.Task {
	with := "bootstrap token"
	if c.Azure.Identity() {
		with = "Azure identity"
	}
	return &waitTLSBootstrap{machine: m, timeout: timeout, with: with}
}

func (t *waitTLSBootstrap) Name() string { return "wait-tls-bootstrap" }

func (t *waitTLSBootstrap) Do(ctx context.Context) (task.Result, error) {
	cert := filepath.Join(t.machine.Root(), node.KubeletClientCert)
	task.Wait(ctx, "the kubelet's TLS bootstrap in machine "+t.machine.Name+" (its CSR approved, "+node.KubeletClientCert+" written)")
	if err := waitFile(ctx, cert, 250*time.Millisecond, t.timeout); err != nil {
		return task.Result{}, fmt.Errorf("the kubelet did not finish its TLS bootstrap within %v (no %s yet; is the CSR approved?): %w; %s", t.timeout, node.KubeletClientCert, err, t.machine.logHint("kubelet"))
	}
	return task.Result{Detail: "client certificate in place (TLS bootstrap with the " + t.with + ")"}, nil
}

// waitFile waits up to timeout for path to exist. Lstat, not Stat: the
// kubelet's certificate link is absolute inside the machine and dangles
// from the host.
func waitFile(ctx context.Context, path string, every, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, every, timeout, true, func(context.Context) (bool, error) {
		_, err := os.Lstat(path)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	})
}

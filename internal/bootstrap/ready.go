package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// waitFile waits for path to exist. Lstat, not Stat: the kubelet's
// certificate link is absolute inside the machine and dangles from the host.
func waitFile(ctx context.Context, path string, every time.Duration) error {
	for {
		if _, err := os.Lstat(path); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// waitNodeReady polls the Node with the kubelet's own credentials (a node
// may read its own Node object) until its Ready condition is True.
func waitNodeReady(ctx context.Context, cfg *rest.Config, nodeName string, progress func(string)) error {
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	last := ""
	for {
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
						return nil
					}
					status = fmt.Sprintf("node Ready=%s: %s", c.Status, c.Message)
				}
			}
		}
		if status != last && progress != nil {
			progress(status)
			last = status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last seen: %s)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

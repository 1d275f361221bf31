package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/task"
)

type disableSwap struct{ host Host }

// DisableSwap returns the task that turns swap off when /proc/swaps lists
// any device: the kubelet refuses to run with swap on.
func DisableSwap(h Host) task.Task { return &disableSwap{host: h} }

func (t *disableSwap) Name() string { return "disable-swap" }

func (t *disableSwap) Do(ctx context.Context) (task.Result, error) {
	data, err := os.ReadFile(filepath.Join(t.host.procDir(), "swaps"))
	if err != nil {
		return task.Result{}, fmt.Errorf("read swaps: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) <= 1 {
		return task.Result{}, nil
	}
	if out, err := t.host.run(ctx, "swapoff", "-a"); err != nil {
		return task.Result{}, fmt.Errorf("swapoff -a: %v: %s", err, bytes.TrimSpace(out))
	}
	return task.Result{Changed: true, Detail: fmt.Sprintf("%d swap device(s) off", len(lines)-1)}, nil
}

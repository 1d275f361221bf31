package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/task"
)

type applySysctls struct{ host Host }

// ApplySysctls returns the task that writes the sysctl.d drop-in for
// Sysctls (so they hold after a reboot) and sets any that differ now.
func ApplySysctls(h Host) task.Task { return &applySysctls{host: h} }

func (t *applySysctls) Name() string { return "apply-sysctls" }

func (t *applySysctls) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	text, err := sysctlFile()
	if err != nil {
		return task.Result{}, err
	}
	changed, err := fsutil.WriteFile(l.OnRoot(l.SysctlDropIn()), text, 0o644)
	if err != nil {
		return task.Result{}, err
	}
	if err := t.host.track(l.SysctlDropIn()); err != nil {
		return task.Result{}, err
	}
	for _, kv := range Sysctls {
		path := filepath.Join(t.host.procDir(), "sys", strings.ReplaceAll(kv[0], ".", "/"))
		cur, err := os.ReadFile(path)
		if err != nil {
			return task.Result{Changed: changed}, fmt.Errorf("sysctl %s: %w", kv[0], err)
		}
		if strings.TrimSpace(string(cur)) == kv[1] {
			continue
		}
		if err := os.WriteFile(path, []byte(kv[1]), 0o644); err != nil {
			return task.Result{Changed: changed}, fmt.Errorf("sysctl %s=%s: %w", kv[0], kv[1], err)
		}
		changed = true
	}
	return task.Result{Changed: changed}, nil
}

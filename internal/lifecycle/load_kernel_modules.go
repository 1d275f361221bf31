package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/task"
)

type loadKernelModules struct{ host Host }

// LoadKernelModules returns the task that writes the modules-load.d file
// for RequiredModules (so they load at boot) and loads any that are not
// loaded or built in now: the machine cannot load modules itself.
func LoadKernelModules(h Host) task.Task { return &loadKernelModules{host: h} }

func (t *loadKernelModules) Name() string { return "load-kernel-modules" }

func (t *loadKernelModules) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	text, err := modulesLoadFile()
	if err != nil {
		return task.Result{}, err
	}
	changed, err := fsutil.WriteFile(l.OnRoot(l.ModulesLoadFile()), text, 0o644)
	if err != nil {
		return task.Result{}, err
	}
	if err := t.host.track(l.ModulesLoadFile()); err != nil {
		return task.Result{}, err
	}
	loaded := loadedModules(t.host.procDir())
	var missing []string
	for _, m := range RequiredModules {
		if loaded[m] {
			continue
		}
		if out, err := t.host.run(ctx, "modprobe", m); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v: %s)", m, err, bytes.TrimSpace(out)))
			continue
		}
		changed = true
	}
	if len(missing) > 0 {
		return task.Result{Changed: changed}, fmt.Errorf("kernel modules not available: %s", strings.Join(missing, ", "))
	}
	return task.Result{Changed: changed}, nil
}

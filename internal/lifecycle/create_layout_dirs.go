package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/task"
)

type createLayoutDirs struct{ host Host }

// CreateLayoutDirs returns the task that creates the layout's directories
// (bin, lib, state, log) that are missing, recording each before it is
// made, and restores their SELinux labels where SELinux is on.
func CreateLayoutDirs(h Host) task.Task { return &createLayoutDirs{host: h} }

func (t *createLayoutDirs) Name() string { return "create-layout-dirs" }

func (t *createLayoutDirs) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	changed := false
	for _, d := range l.Dirs() {
		path := l.OnRoot(d)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := t.host.track(d); err != nil {
			return task.Result{}, err
		}
		if err := fsutil.MkdirAll(path, 0o755); err != nil {
			return task.Result{Changed: changed}, err
		}
		changed = true
		if se := hostos.DetectSELinux(l.Root()); se.Mode == "enforcing" || se.Mode == "permissive" {
			if out, err := t.host.run(ctx, "restorecon", "-R", path); err != nil {
				return task.Result{Changed: true}, fmt.Errorf("restorecon %s: %v: %s", d, err, bytes.TrimSpace(out))
			}
		}
	}
	return task.Result{Changed: changed}, nil
}

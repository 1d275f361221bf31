package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/task"
)

type removeLayerCache struct {
	layout layout.Layout
	keep   bool
}

// RemoveLayerCache returns the task that removes the worker image's
// unpacked layers (the layer cache in the machines dir), unless keep: a
// reset that keeps them lets the next start make the machine in under a
// second. uninstall.sh resets without keeping them.
func RemoveLayerCache(l layout.Layout, keep bool) task.Task {
	return &removeLayerCache{layout: l, keep: keep}
}

func (t *removeLayerCache) Name() string { return "remove-layer-cache" }

func (t *removeLayerCache) Do(ctx context.Context) (task.Result, error) {
	if t.keep {
		return task.Result{Detail: "kept " + t.layout.LayerCacheDir() + " (--keep-image-cache)"}, nil
	}
	changed, err := machine.RemoveLayerCache(t.layout)
	return task.Result{Changed: changed}, err
}

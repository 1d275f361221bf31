package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writeJoinedMarker struct {
	host     Host
	nodeName string
}

// WriteJoinedMarker returns the task that writes the layout's joined
// marker, last: a first-boot unit uses ConditionPathExists=! on it so
// provisioning runs once, and the agent keeps the machine running only
// where it is.
func WriteJoinedMarker(h Host, nodeName string) task.Task {
	return &writeJoinedMarker{host: h, nodeName: nodeName}
}

func (t *writeJoinedMarker) Name() string { return "write-joined-marker" }

func (t *writeJoinedMarker) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	path := l.JoinedMarker()
	if err := t.host.track(path); err != nil {
		return task.Result{}, err
	}
	changed, err := fsutil.WriteFile(l.OnRoot(path), []byte(t.nodeName+"\n"), 0o644)
	return task.Result{Changed: changed}, err
}

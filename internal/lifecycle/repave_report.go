package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/state"
)

// report makes a repave that ended visible outside the host: an Event on
// the Node (Repaved with from, to and the duration; RolledBack or
// RepaveFailed with the reason) and its duration in the metrics store by
// result. Both are best effort, like every Event and metric: a repave is
// not undone because it could not be told.
func (r *Repave) report(ctx context.Context, rec *state.Repave) {
	_ = metrics.OpenStore(r.opts.Layout).Observe(metrics.OpRepave, map[string]string{"result": rec.Result}, rec.Duration)
	from := rec.FromMachine + " (Kubernetes " + rec.FromVersion + ")"
	to := rec.ToMachine + " (Kubernetes " + rec.ToVersion + ")"
	switch {
	case rec.Result == state.RepaveSucceeded && rec.SwitchBack:
		_ = r.events.Normal(ctx, events.ReasonRepaved, "aks-flex-node switched this node back from machine %s to its retained machine %s in %v, fetching nothing", from, to, rec.Duration)
	case rec.Result == state.RepaveSucceeded:
		_ = r.events.Normal(ctx, events.ReasonRepaved, "aks-flex-node repaved this node from machine %s to machine %s in %v", from, to, rec.Duration)
	case rec.Result == state.RepaveRolledBack:
		_ = r.events.Warning(ctx, events.ReasonRolledBack, "repave from machine %s to machine %s: %s (after %v); machine %s serves again", from, to, rec.Reason, rec.Duration, rec.FromMachine)
	default:
		_ = r.events.Warning(ctx, events.ReasonRepaveFailed, "repave from machine %s to machine %s failed after %v: %s", from, to, rec.Duration, rec.Reason)
	}
}

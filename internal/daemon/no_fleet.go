package daemon

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// noFleetMaxWait bounds the wait between looks at a cluster with no fleet.
const noFleetMaxWait = 30 * time.Minute

// noFleet is a rollout loop's wait between looks at a cluster that does
// not serve FlexNodeRollouts to this node: without the CRD (404) or
// without the nodes' RBAC (403, which the authorizer answers before the
// resource is looked up), i.e. `cluster prepare --fleet` was not applied.
// Most clusters never run a rollout, so this is the normal case and not
// an error: the loop passes, and looks again after a doubling wait (1
// minute up to noFleetMaxWait), not every interval.
type noFleet struct {
	wait time.Duration
	next time.Time
}

// notServed says whether err is the cluster not serving the rollouts.
func notServed(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) }

// due is whether the loop should look at the cluster now.
func (b *noFleet) due(now time.Time) bool { return !now.Before(b.next) }

// absent records a look that found no fleet and returns the wait until
// the next one.
func (b *noFleet) absent(now time.Time) time.Duration {
	b.wait = min(max(2*b.wait, time.Minute), noFleetMaxWait)
	b.next = now.Add(b.wait)
	return b.wait
}

// present records a look that found the fleet served.
func (b *noFleet) present() { b.wait, b.next = 0, time.Time{} }

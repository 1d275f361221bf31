package lifecycle

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pollCap is the longest wait between two reads of a jittered poll.
const pollCap = 2 * time.Second

// pollJittered runs cond at once and then after waits that start at first,
// grow by half each time up to pollCap and are each stretched by up to
// half again at random, until cond is done, fails, or timeout passes
// (then wait.ErrorInterrupted of the deadline). It is how start and
// repave wait on the API server: a thousand hosts that boot at once (a
// site's power back) reach the same step at nearly the same moment, and
// a fixed period would keep their reads in lockstep for the whole wait.
func pollJittered(ctx context.Context, first, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b := wait.Backoff{Duration: first, Factor: 1.5, Jitter: 0.5, Cap: pollCap, Steps: math.MaxInt32}
	return wait.DelayFunc(b.DelayFunc()).Until(ctx, true, true, cond)
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// The status writer's election timing. A fleet has one writer and
// hundreds or thousands of candidates, so the candidates' cost matters
// more than a fast takeover: each candidate reads the lock once (from the
// watch cache) and then follows it through a watch on that one object
// (slotlock_watch.go: a request per candidate every ten minutes or so,
// not a read every CandidatePeriod), judging expiry by its own clock. A
// writer that releases the lock is replaced at once, one that dies
// within LeaseDuration; a status that is a minute late is no harm, since
// every node's own truth is on its Node meanwhile. CandidatePeriod is the
// wait (jittered to 50-150 %) before a candidate reads the lock again
// after its watch failed or could not go on. The writer renews every
// RenewPeriod (one write) and steps down when it has not renewed for
// RenewDeadline, well before a candidate may take over (LeaseDuration),
// so two writers never overlap while the clocks tick at the same rate.
const (
	DefaultLeaseDuration   = 60 * time.Second
	DefaultRenewDeadline   = 40 * time.Second
	DefaultRenewPeriod     = 10 * time.Second
	DefaultCandidatePeriod = 20 * time.Second
)

// ErrLeadershipLost is Election.Run after this process led and stopped
// leading before its context ended.
var ErrLeadershipLost = errors.New("lost the status writer election")

// Election runs Lead while this process holds Lock, as client-go's
// leaderelection.LeaderElector runs OnStartedLeading (see SlotLock for
// why it is not used).
type Election struct {
	Lock *SlotLock
	// RenewDeadline, RenewPeriod and CandidatePeriod are as the defaults
	// above say (zero: the default); the lease duration is the Lock's.
	RenewDeadline, RenewPeriod, CandidatePeriod time.Duration
	// Lead is what the leader does, until its context ends (leadership
	// lost, or the election's context ended). An error it returns early
	// makes the leader step down.
	Lead func(ctx context.Context) error
	// Leading, when set, is told each time this process starts or stops
	// leading (a metric).
	Leading func(bool)
	Log     *slog.Logger
}

func (e *Election) defaults() {
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = DefaultRenewDeadline
	}
	if e.RenewPeriod <= 0 {
		e.RenewPeriod = DefaultRenewPeriod
	}
	if e.CandidatePeriod <= 0 {
		e.CandidatePeriod = DefaultCandidatePeriod
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.Leading == nil {
		e.Leading = func(bool) {}
	}
}

// Run campaigns until this process leads, leads until it loses the lock
// or Lead fails, then returns (ErrLeadershipLost, or Lead's error); nil
// when ctx ends, after releasing the lock if it held it.
func (e *Election) Run(ctx context.Context) error {
	e.defaults()
	if !e.acquire(ctx) {
		return nil
	}
	e.Log.Info("elected the rollouts' status writer", "lock", e.Lock.Describe(), "identity", e.Lock.Identity())
	e.Leading(true)
	defer e.Leading(false)
	lctx, cancel := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() {
		led <- e.Lead(lctx)
		cancel() // Lead ending early ends the term too
	}()
	err := e.renew(lctx)
	cancel()
	if lerr := <-led; err == nil && ctx.Err() == nil {
		if lerr == nil {
			lerr = errors.New("it stopped on its own")
		}
		err = fmt.Errorf("status writer: %w", lerr)
	}
	// Step down in the open: the next candidate takes over at its next
	// look instead of a lease duration later. Bounded, and on a context
	// of its own, since ctx may be what ended.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.RenewPeriod)
	defer rcancel()
	if rerr := e.Lock.Release(rctx); rerr != nil {
		e.Log.Warn("could not release the status writer lock; a candidate takes over when it expires", "lock", e.Lock.Describe(), "error", rerr)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// acquire reads the lock and takes it when it may; else it follows the
// lock through a watch until it may take it (follow). A failed read or
// watch is tried again after CandidatePeriod, jittered to 50-150 % so a
// fleet that lost the server together does not come back in lockstep.
// False when ctx ended first.
func (e *Election) acquire(ctx context.Context) bool {
	logged := ""
	for {
		held, holder, err := e.tryOnce(ctx, e.CandidatePeriod)
		if err == nil && !held {
			if holder != logged {
				e.Log.Info("status writer election: another agent writes", "lock", e.Lock.Describe(), "writer", holder)
				logged = holder
			}
			held, err = e.follow(ctx)
		}
		switch {
		case held:
			return true
		case ctx.Err() != nil:
			return false
		case err != nil:
			e.Log.Warn("status writer election: will try again", "lock", e.Lock.Describe(), "error", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.CandidatePeriod/2 + rand.N(e.CandidatePeriod+1)):
		}
	}
}

// renew renews every RenewPeriod until ctx ends (nil) or the lock is
// lost: another holds it, or no renewal succeeded for RenewDeadline.
func (e *Election) renew(ctx context.Context) error {
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.RenewPeriod):
		}
		left := e.RenewDeadline - time.Since(last)
		held, holder, err := e.tryOnce(ctx, left)
		switch {
		case held:
			last = time.Now()
			continue
		case ctx.Err() != nil:
			return nil
		case err == nil && holder != "" && holder != e.Lock.Identity():
			e.Log.Warn("status writer: another agent took the lock", "writer", holder)
			return ErrLeadershipLost
		}
		if time.Since(last) >= e.RenewDeadline {
			e.Log.Warn("status writer: not renewed within the renew deadline; stepping down", "deadline", e.RenewDeadline, "error", err)
			return ErrLeadershipLost
		}
	}
}

func (e *Election) tryOnce(ctx context.Context, bound time.Duration) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, max(bound, time.Second))
	defer cancel()
	return e.Lock.TryAcquireOrRenew(ctx)
}

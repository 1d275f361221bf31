package fleet

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// Phase-change Events lost while the API server was away (issue 29/30):
// the Record keeps each one the API server certainly did not get (a
// connection that was never made), and the next pass that reaches it
// sends them, oldest first, each at most once, with when it happened.
// An Event whose write may have reached the server (a timeout after the
// request left, an answer that refused it) is not kept: sending it again
// could show it twice, and an Event is never worth a duplicate.

// maxUnsentEvents bounds the Record's queue: a node cut off for a day
// still has a few phases to tell, not a log; the oldest go first.
const maxUnsentEvents = 16

// UnsentEvent is a phase-change Event the API server did not take.
type UnsentEvent struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// recordEvent records a phase-change Event, keeping it in the Record
// when the API server was not reached. The caller holds repMu.
func (a *Agent) recordEvent(ctx context.Context, eventType, reason, message string) {
	if a.Events == nil {
		return
	}
	err := a.Events.Record(ctx, eventType, reason, message)
	if err == nil || !notSent(err) {
		return
	}
	q := append(a.rec.UnsentEvents, UnsentEvent{Type: eventType, Reason: reason, Message: message, At: a.now().UTC()})
	if len(q) > maxUnsentEvents {
		a.log().Warn("rollout: too many Events waiting for the API server; the oldest is dropped", "reason", q[0].Reason, "at", q[0].At)
		q = q[len(q)-maxUnsentEvents:]
	}
	a.rec.UnsentEvents = q
	if err := a.save(); err != nil {
		a.log().Warn("rollout: keep the Event for when the API server is back", "error", err)
	}
}

// resendEvents sends the Events the Record keeps, oldest first, each
// once; it stops (keeping the rest) at the first the API server still
// does not get.
func (a *Agent) resendEvents(ctx context.Context) error {
	a.repMu.Lock()
	defer a.repMu.Unlock()
	q := a.rec.UnsentEvents
	if len(q) == 0 || a.Events == nil {
		return nil
	}
	sent := 0
	for _, e := range q {
		msg := e.Message + " (at " + e.At.Format(time.RFC3339) + "; sent late: the API server was away)"
		if err := a.Events.Record(ctx, e.Type, e.Reason, msg); err != nil && notSent(err) {
			break
		}
		sent++
	}
	if sent == 0 {
		return nil
	}
	a.rec.UnsentEvents = q[sent:]
	if len(a.rec.UnsentEvents) == 0 {
		a.rec.UnsentEvents = nil
	}
	a.log().Info("rollout: sent the Events kept while the API server was away", "sent", sent, "left", len(a.rec.UnsentEvents))
	return a.save()
}

// notSent says err is a request that never reached the API server: the
// connection was not made (refused, no route, a name that does not
// resolve). A timeout or an answer is not: the server may have the Event.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

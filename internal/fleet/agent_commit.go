package fleet

import "context"

// The Record's applied release is written at the switch's commit point,
// under the node lock the repave holds (issue 29): the Host calls
// Committed from the repave's finish phase, right after the applied
// state names the new side. Written after the repave released the lock,
// a `start` run in between would read the old release and repave the
// node back to it.
//
// A crash between the commit (the applied state) and the Record's write
// leaves a node that runs the release with a Record that does not say so
// yet: the agent's next pass resumes its switch, finds the node running
// the release (Host.Running) and records it before anything else; only a
// `start` run before that pass would take the node back (status shows
// the rollout at step switch meanwhile). Writing the Record first instead
// would leave, on a crash before the commit (the repave's recovery then
// brings the old side back), a Record naming a release the node never
// ran. Both files are written atomically (fsutil), so neither is ever
// half written.

type commitKey struct{}

// Committed tells the agent that ctx's switch (or switch back) has
// committed: the node now runs the new side. The Host calls it under the
// node lock, from the repave's finish phase; outside an agent's switch it
// does nothing.
func Committed(ctx context.Context) error {
	if f, ok := ctx.Value(commitKey{}).(func() error); ok {
		return f()
	}
	return nil
}

func withCommit(ctx context.Context, f func() error) context.Context {
	return context.WithValue(ctx, commitKey{}, f)
}

// recordSwitched records that the node switched to r's release: the
// release it ran before (Applied) becomes the retained side's
// (Previous). Idempotent: the commit hook and the return of the switch
// both call it.
func (a *Agent) recordSwitched(rel *AppliedRelease) error {
	a.repMu.Lock()
	defer a.repMu.Unlock()
	if cur := a.rec.Applied; cur == nil || cur.Rollout != rel.Rollout || cur.Generation != rel.Generation {
		a.rec.Previous, a.rec.Applied = a.rec.Applied, rel
	}
	return a.save()
}

// recordSwitchedBack records that the node switched back to its retained
// side: Previous is what it runs again, and the release it left is the
// retained side's now. from is the Applied the switch back left: once it
// is no longer Applied, the swap was recorded (idempotent).
func (a *Agent) recordSwitchedBack(from *AppliedRelease) error {
	a.repMu.Lock()
	defer a.repMu.Unlock()
	if a.rec.Applied == from {
		a.rec.Applied, a.rec.Previous = a.rec.Previous, from
	}
	return a.save()
}

// kept is what of the Record outlives the rollout it is about: the
// releases of both sides and the Events not sent yet.
func (r Record) kept() Record {
	return Record{Applied: r.Applied, Previous: r.Previous, UnsentEvents: r.UnsentEvents}
}

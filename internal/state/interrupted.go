package state

import (
	"fmt"
	"time"
)

// Steps of a repave in flight (Repave.Step) after which the repave may
// have cordoned the Node: its drain and what follows.
var cordonedSteps = map[string]bool{"drain": true, "switch": true, "finish": true}

// MayHaveCordoned says whether the repave r, interrupted at its step, may
// have cordoned the Node itself (so closing it uncordons): its drain had
// begun and the Node was schedulable before it.
func (r *Repave) MayHaveCordoned() bool {
	return cordonedSteps[r.Step] && !r.WasUnschedulable
}

// CloseInterrupted closes the repave in flight, whose process is gone, as
// RepaveInterrupted, now: the recovery rule is that the side the applied
// state names (save-state writes it, the switch's commit point) is the
// active one. Before save-state that is the old side, and the side the
// repave was preparing is recorded as not in use; after it, the new side,
// recorded with what the applied state says it runs. A switch back
// prepared nothing, so its retained side stays as it was. It returns the
// closed record, nil when no repave was in flight.
func (s *Sides) CloseInterrupted(a Applied, now time.Time) *Repave {
	r := s.InFlight
	if r == nil {
		return nil
	}
	if s.Machines == nil {
		s.Machines = map[string]Side{}
	}
	side := "old"
	switch a.Machine {
	case r.ToMachine:
		side = "new"
		s.Machines[r.ToMachine] = Side{KubernetesVersion: r.ToVersion, Image: a.Image, ImageDigest: a.ImageDigest}
	default:
		if r.Step != "" && r.Step != "stage" && !r.SwitchBack {
			to := s.Machines[r.ToMachine]
			to.KubernetesVersion = r.ToVersion
			to.Failed = "repave interrupted at " + r.Step + "; prepared again by the next repave"
			s.Machines[r.ToMachine] = to
		}
	}
	s.Active = a.Machine
	r.Finished = now.UTC()
	r.Duration = r.Finished.Sub(r.Started).Round(time.Millisecond)
	r.Result = RepaveInterrupted
	r.Reason = fmt.Sprintf("the repave stopped at its %s step (its process was killed or the host lost power); the node serves on %s, the %s side", r.Step, a.Machine, side)
	r.Step = ""
	s.InFlight, s.Last = nil, r
	return r
}

package machineapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Settings are what a Machine's goal sets on the node: the Kubernetes
// version, maxPods, labels, taints and the kubelet's image-GC thresholds.
type Settings struct {
	Version              string            `json:"kubernetesVersion,omitempty"`
	MaxPods              int               `json:"maxPods,omitempty"`
	Labels               map[string]string `json:"labels,omitempty"`
	Taints               []string          `json:"taints,omitempty"`
	ImageGCHighThreshold int               `json:"imageGCHighThreshold,omitempty"`
	ImageGCLowThreshold  int               `json:"imageGCLowThreshold,omitempty"`
}

// Applied is what the node runs now and the eTag of the Machine it came
// from ("" before the node followed one).
type Applied struct {
	Settings
	ETag string
}

// Observed is one look at the goal and the node: the Machine (nil when
// ARM says there is none), or the error asking ARM for it; whether the
// node's Node object exists and whether it carries the deletion taint.
type Observed struct {
	Machine           *Machine
	ARMError          error
	NodeExists        bool
	NodeDeletionTaint bool
}

// Action is what the agent does about a decision.
type Action string

const (
	// ActionNone: the goal is applied; report it.
	ActionNone Action = "applied"
	// ActionApplyInPlace: only labels or taints changed: set them on the
	// Node and the kubelet's registration settings, no repave; adopt the
	// eTag.
	ActionApplyInPlace Action = "apply-in-place"
	// ActionRepave: the version, maxPods or image-GC thresholds changed
	// and the Node is gone (AKS drained and deleted it): repave to Goal.
	ActionRepave Action = "repave"
	// ActionWaitForNodeDeletion: such a change while the Node is still
	// there: AKS drives the disruption, the agent waits for its signal.
	ActionWaitForNodeDeletion Action = "wait-for-node-deletion"
	// ActionReset: the Machine is gone and the Node carries the deletion
	// taint: drain and reset the host.
	ActionReset Action = "reset"
	// ActionWaitForDeletionTaint: the Machine is gone but the Node has no
	// deletion taint yet: change nothing until AKS says so.
	ActionWaitForDeletionTaint Action = "wait-for-deletion-taint"
	// ActionHold: ARM is unreachable or erroring: change nothing, retry,
	// report.
	ActionHold Action = "hold"
)

// Decision is one row of the table: the action, the goal it acts
// toward (the applied settings with the Machine's fields over them), the
// eTag to adopt once done, and why, for the decision's log line.
type Decision struct {
	Action Action
	Goal   Settings
	ETag   string
	Reason string
}

// String is the decision's one log line.
func (d Decision) String() string {
	s := "machine-goal decision=" + string(d.Action)
	if d.ETag != "" {
		s += " eTag=" + d.ETag
	}
	return s + " reason=" + fmt.Sprintf("%q", d.Reason)
}

// Decide is upstream's decision table, a pure function of what the node
// runs and what it observed.
func Decide(applied Applied, o Observed) Decision {
	switch {
	case o.ARMError != nil:
		return Decision{Action: ActionHold, Goal: applied.clone(), Reason: "the AKS Machine could not be read: " + o.ARMError.Error() + "; nothing changed, retrying"}
	case o.Machine == nil && o.NodeDeletionTaint:
		return Decision{Action: ActionReset, Reason: "the AKS Machine is gone and the Node carries the deletion taint"}
	case o.Machine == nil:
		return Decision{Action: ActionWaitForDeletionTaint, Goal: applied.clone(), Reason: "the AKS Machine is gone; waiting for the Node's deletion taint before resetting"}
	}
	goal := GoalSettings(o.Machine, applied.Settings)
	etag := o.Machine.ETag()
	if st := provisioningState(o.Machine); st != "" && !Terminal(st) {
		return Decision{Action: ActionHold, Goal: applied.clone(), Reason: "the AKS Machine is " + st + "; waiting for its operation to end"}
	}
	disruptive := diffs(applied.Settings, goal, true)
	inPlace := diffs(applied.Settings, goal, false)
	switch {
	case len(disruptive) > 0 && !o.NodeExists:
		return Decision{Action: ActionRepave, Goal: goal, ETag: etag, Reason: strings.Join(disruptive, ", ") + " changed and the Node is gone: repaving to the goal"}
	case len(disruptive) > 0:
		return Decision{Action: ActionWaitForNodeDeletion, Goal: applied.clone(), Reason: strings.Join(disruptive, ", ") + " changed; waiting for AKS to drain and delete the Node before repaving"}
	case len(inPlace) > 0:
		return Decision{Action: ActionApplyInPlace, Goal: goal, ETag: etag, Reason: strings.Join(inPlace, " and ") + " changed: applying in place"}
	}
	reason := "the goal is applied"
	if etag != applied.ETag {
		reason += "; adopting the Machine's eTag"
	}
	return Decision{Action: ActionNone, Goal: goal, ETag: etag, Reason: reason}
}

// clone is a copy of the settings sharing no map or slice.
func (a Applied) clone() Settings {
	s := a.Settings
	s.Labels, s.Taints = maps.Clone(s.Labels), slices.Clone(s.Taints)
	return s
}

func provisioningState(m *Machine) string {
	if m.Properties == nil {
		return ""
	}
	return m.Properties.ProvisioningState
}

// GoalSettings are the settings Machine m sets, over base for the fields
// it leaves unset (the cluster wins for the fields it sets). A goal
// version of major.minor follows currentOrchestratorVersion when that is
// a patch of it.
func GoalSettings(m *Machine, base Settings) Settings {
	g := base
	g.Labels, g.Taints = maps.Clone(base.Labels), slices.Clone(base.Taints)
	if m == nil || m.Properties == nil || m.Properties.Kubernetes == nil {
		return g
	}
	k := m.Properties.Kubernetes
	switch v := strings.TrimPrefix(k.OrchestratorVersion, "v"); {
	case v == "":
	case strings.Count(v, ".") == 1 && SameVersion(v, k.CurrentOrchestratorVersion):
		g.Version = strings.TrimPrefix(k.CurrentOrchestratorVersion, "v")
	case strings.Count(v, ".") == 1 && SameVersion(v, base.Version):
		g.Version = base.Version
	default:
		g.Version = v
	}
	if k.MaxPods != nil {
		g.MaxPods = int(*k.MaxPods)
	}
	if k.NodeLabels != nil {
		g.Labels = maps.Clone(k.NodeLabels)
	}
	if k.NodeTaints != nil {
		g.Taints = slices.Clone(k.NodeTaints)
	}
	if kc := k.KubeletConfig; kc != nil {
		if kc.ImageGcHighThreshold != nil {
			g.ImageGCHighThreshold = int(*kc.ImageGcHighThreshold)
		}
		if kc.ImageGcLowThreshold != nil {
			g.ImageGCLowThreshold = int(*kc.ImageGcLowThreshold)
		}
	}
	return g
}

// diffs names what differs between a and b: the fields that need a
// repave (disruptive) or the ones applied in place.
func diffs(a, b Settings, disruptive bool) []string {
	var out []string
	add := func(differ bool, name string) {
		if differ {
			out = append(out, name)
		}
	}
	if disruptive {
		add(a.Version != b.Version, fmt.Sprintf("the Kubernetes version (%s -> %s)", a.Version, b.Version))
		add(a.MaxPods != b.MaxPods, fmt.Sprintf("maxPods (%d -> %d)", a.MaxPods, b.MaxPods))
		add(a.ImageGCHighThreshold != b.ImageGCHighThreshold || a.ImageGCLowThreshold != b.ImageGCLowThreshold,
			fmt.Sprintf("the image-GC thresholds (%d/%d -> %d/%d)", a.ImageGCHighThreshold, a.ImageGCLowThreshold, b.ImageGCHighThreshold, b.ImageGCLowThreshold))
		return out
	}
	add(!maps.Equal(a.Labels, b.Labels) && !(len(a.Labels) == 0 && len(b.Labels) == 0), "labels")
	add(!sameSet(a.Taints, b.Taints), "taints")
	return out
}

// sameSet compares taints as a set: their order means nothing.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

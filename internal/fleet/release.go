package fleet

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionType is the Node condition that carries the node's own truth
// about the rollout that selects it (DESIGN decision 12): the status
// writer aggregates these; `kubectl describe node` shows them.
const ConditionType corev1.NodeConditionType = "FlexNodeRelease"

// Phase is where a node is in a rollout.
type Phase string

// The phases, in order; Failed can follow any of them.
const (
	PhaseStaged   Phase = "Staged"   // the release is fetched and verified on the inactive side
	PhaseUpdating Phase = "Updating" // holds a slot: cordoned, draining, switching or soaking
	PhaseUpdated  Phase = "Updated"  // runs the release and has soaked; its slot is released
	PhaseFailed   Phase = "Failed"   // back on its old side; keeps its slot
	// PhaseManagedElsewhere is a node whose config names an AKS Machine
	// through ARM: AKS drives its disruption (DESIGN decision 11), so it
	// never takes a slot; the rollout's status names it.
	PhaseManagedElsewhere Phase = "ManagedElsewhere"
)

// NodeRelease is one node's FlexNodeRelease condition, decoded.
type NodeRelease struct {
	Rollout    string
	Generation int64 // the rollout's metadata.generation the node acts on
	Phase      Phase
	Step       string // stage, drain, switch, soak: where it is or failed
	Reason     string // CamelCase, e.g. DiskFull, RolledBack; may be empty
	Message    string // free text, bounded by the writer
	Since      time.Time
}

// maxMessage bounds the free text a node writes on its own Node.
const maxMessage = 1024

// The condition's message is the one place the structured fields live,
// so kubectl shows them as written and the status writer parses them:
// "rollout=<name> generation=<n> step=<step> reason=<Reason>: <message>".
var messageRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^rollout=([a-z0-9][a-z0-9.-]*) generation=([0-9]+) step=([a-z]*) reason=([A-Za-z0-9]*)(?:: ([\s\S]*))?$`)
})

// Condition is r as a Node condition; its LastTransitionTime is Since.
// Status is True when Updated, False when Failed, Unknown in between.
func (r NodeRelease) Condition(now time.Time) corev1.NodeCondition {
	status := corev1.ConditionUnknown
	switch r.Phase {
	case PhaseUpdated:
		status = corev1.ConditionTrue
	case PhaseFailed:
		status = corev1.ConditionFalse
	}
	msg := fmt.Sprintf("rollout=%s generation=%d step=%s reason=%s", r.Rollout, r.Generation, r.Step, r.Reason)
	if r.Message != "" {
		m := r.Message
		if len(m) > maxMessage {
			m = m[:maxMessage]
		}
		msg += ": " + m
	}
	return corev1.NodeCondition{
		Type: ConditionType, Status: status, Reason: string(r.Phase), Message: msg,
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(r.Since),
	}
}

// ReadNodeRelease is the node's FlexNodeRelease condition; ok is false
// when it has none. A condition that is not in this format (written by
// something else) is an error: cluster data is input to validate.
func ReadNodeRelease(n *corev1.Node) (r NodeRelease, ok bool, err error) {
	for _, c := range n.Status.Conditions {
		if c.Type != ConditionType {
			continue
		}
		m := messageRE().FindStringSubmatch(c.Message)
		if m == nil {
			return NodeRelease{}, true, fmt.Errorf("node %s: condition %s: message %.80q is not rollout=… generation=… step=… reason=…", n.Name, ConditionType, c.Message)
		}
		gen, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			return NodeRelease{}, true, fmt.Errorf("node %s: condition %s: generation %q: %w", n.Name, ConditionType, m[2], err)
		}
		switch p := Phase(c.Reason); p {
		case PhaseStaged, PhaseUpdating, PhaseUpdated, PhaseFailed, PhaseManagedElsewhere:
		default:
			return NodeRelease{}, true, fmt.Errorf("node %s: condition %s: reason %q is not a phase (Staged, Updating, Updated, Failed, ManagedElsewhere)", n.Name, ConditionType, c.Reason)
		}
		return NodeRelease{Rollout: m[1], Generation: gen, Phase: Phase(c.Reason), Step: m[3], Reason: m[4],
			Message: m[5], Since: c.LastTransitionTime.Time}, true, nil
	}
	return NodeRelease{}, false, nil
}

// SetNodeRelease puts r on n's conditions. Since is kept from the
// condition already there when the rollout, generation, phase and step are
// unchanged (a re-report is not a transition), else it is now.
func SetNodeRelease(n *corev1.Node, r NodeRelease, now time.Time) corev1.NodeCondition {
	if old, ok, err := ReadNodeRelease(n); ok && err == nil && old.Rollout == r.Rollout && old.Generation == r.Generation &&
		old.Phase == r.Phase && old.Step == r.Step {
		r.Since = old.Since
	} else {
		r.Since = now
	}
	c := r.Condition(now)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionType {
			n.Status.Conditions[i] = c
			return c
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
	return c
}

// ConditionPatch is the strategic merge patch of nodes/status that sets c
// alone (conditions merge by type), which the Node authorizer lets a node
// send for its own Node.
func ConditionPatch(c corev1.NodeCondition) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
}

// String is how fleet status shows it: "Failed at switch (RolledBack) since …".
func (r NodeRelease) String() string {
	var b strings.Builder
	b.WriteString(string(r.Phase))
	if r.Step != "" {
		b.WriteString(" at " + r.Step)
	}
	if r.Reason != "" {
		b.WriteString(" (" + r.Reason + ")")
	}
	b.WriteString(" since " + r.Since.UTC().Format(time.RFC3339))
	return b.String()
}

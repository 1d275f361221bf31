package machineapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// Want is what the node registers as its Machine, from the config.
type Want struct {
	Version              string
	MaxPods              int
	Labels               map[string]string
	Taints               []string
	ImageGCHighThreshold int
	ImageGCLowThreshold  int
}

// WantFromConfig is the Machine a defaulted config describes.
func WantFromConfig(c *config.Config) Want {
	return Want{
		Version: strings.TrimPrefix(c.Components.Kubernetes, "v"), MaxPods: c.Node.MaxPods,
		Labels: maps.Clone(c.Node.Labels), Taints: slices.Clone(c.Node.Taints),
		ImageGCHighThreshold: c.Node.Kubelet.ImageGCHighThreshold, ImageGCLowThreshold: c.Node.Kubelet.ImageGCLowThreshold,
	}
}

// FlexNodeTag marks a Machine as a flex node, as upstream tags it.
const FlexNodeTag = "aks-flex-node"

func i32(v int) *int32 {
	n := int32(v) //nolint:gosec // validated small by config
	return &n
}

// machine is the Machine body w describes.
func (w Want) machine() *Machine {
	k := &KubernetesProfile{OrchestratorVersion: w.Version, NodeLabels: w.Labels, NodeTaints: w.Taints}
	if w.MaxPods > 0 {
		k.MaxPods = i32(w.MaxPods)
	}
	if w.ImageGCHighThreshold > 0 {
		k.KubeletConfig = &KubeletConfig{ImageGcHighThreshold: i32(w.ImageGCHighThreshold), ImageGcLowThreshold: i32(w.ImageGCLowThreshold)}
	}
	return &Machine{Properties: &MachineProperties{Kubernetes: k, Tags: map[string]string{FlexNodeTag: "true"}}}
}

// Outcome is what registration did.
type Outcome string

const (
	Created Outcome = "created"
	Adopted Outcome = "adopted"
	Updated Outcome = "updated"
)

// Registration is the Machine after registration and what it took.
type Registration struct {
	Outcome Outcome
	Machine *Machine
	// ETag is the settings version the node adopted.
	ETag string
	// Attempts counts the reads; more than one means the eTag moved
	// (412) and registration decided again.
	Attempts int
}

// maxDecisions bounds how often a moving eTag makes registration read
// and decide again.
const maxDecisions = 4

// Register applies upstream's rule: no Machine, create it from the
// config (If-None-Match: *); a Machine of the same Kubernetes version,
// adopt its eTag; of another version, update it (If-Match: its eTag) and
// require the answer to name the version asked for. A 412 means the
// Machine changed between the read and the write: read and decide again.
func Register(ctx context.Context, c Backend, w Want) (Registration, error) {
	for n := 1; n <= maxDecisions; n++ {
		m, err := c.Get(ctx)
		if err != nil {
			return Registration{Attempts: n}, err
		}
		var out Outcome
		var pre Precondition
		switch {
		case m == nil:
			out, pre = Created, Precondition{IfNoneMatch: true}
		case SameVersion(m.Version(), w.Version):
			return Registration{Outcome: Adopted, Machine: m, ETag: m.ETag(), Attempts: n}, nil
		default:
			out, pre = Updated, Precondition{IfMatch: m.ETag()}
		}
		got, err := c.Put(ctx, w.machine(), pre)
		if IsPreconditionFailed(err) {
			continue
		}
		if err != nil {
			return Registration{Attempts: n}, err
		}
		if !SameVersion(got.Version(), w.Version) {
			return Registration{Attempts: n, Machine: got}, fmt.Errorf("PUT %s: asked for Kubernetes %s, the Machine answers %q", c.Describe(), w.Version, got.Version())
		}
		return Registration{Outcome: out, Machine: got, ETag: got.ETag(), Attempts: n}, nil
	}
	return Registration{Attempts: maxDecisions}, fmt.Errorf("register %s: the Machine's eTag moved on each of %d tries (412); something else keeps changing it", c.Describe(), maxDecisions)
}

// SameVersion compares Kubernetes versions without their "v"; a goal of
// major.minor matches any patch of it.
func SameVersion(goal, node string) bool {
	goal, node = strings.TrimPrefix(goal, "v"), strings.TrimPrefix(node, "v")
	if goal == node {
		return true
	}
	return goal != "" && strings.Count(goal, ".") == 1 && strings.HasPrefix(node, goal+".")
}

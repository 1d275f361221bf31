package machineapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
)

// SettingsFromConfig are the settings a defaulted config gives the node
// before it followed any Machine.
func SettingsFromConfig(c *config.Config) Settings {
	w := WantFromConfig(c)
	return Settings{Version: w.Version, MaxPods: w.MaxPods, Labels: w.Labels, Taints: w.Taints,
		ImageGCHighThreshold: w.ImageGCHighThreshold, ImageGCLowThreshold: w.ImageGCLowThreshold}
}

// Overlay is config c with the settings s over it, a copy: the fields a
// Machine sets win over the file's (design decision 11), so the kubelet
// rendered from the result runs the goal.
func (s Settings) Overlay(c *config.Config) *config.Config {
	cc := *c
	if s.Version != "" {
		cc.Components.Kubernetes = s.Version
	}
	if s.MaxPods > 0 {
		cc.Node.MaxPods = s.MaxPods
	}
	// Labels a node may not set on itself would stop the kubelet at its
	// start; they are AKS's to set on the Node.
	cc.Node.Labels = maps.Clone(s.Labels)
	maps.DeleteFunc(cc.Node.Labels, func(k, _ string) bool { return !NodeMaySetLabel(k) })
	cc.Node.Taints = slices.Clone(s.Taints)
	if s.ImageGCHighThreshold > 0 {
		cc.Node.Kubelet.ImageGCHighThreshold, cc.Node.Kubelet.ImageGCLowThreshold = s.ImageGCHighThreshold, s.ImageGCLowThreshold
	}
	return &cc
}

// GoalRecord is what the agent keeps of following its Machine, in the
// state dir: the settings the node runs and the Machine eTag they came
// from (the applied settings version), the last decision, its reason and
// error. ARM's Machine status is not the node's to write, so this, the
// Node's condition, status, debug and the metrics are where it shows.
type GoalRecord struct {
	Applied  Settings  `json:"applied"`
	ETag     string    `json:"eTag,omitempty"`
	Decision Action    `json:"decision,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
	// NodeUID is the Node's UID at the last pass: a Node with another UID
	// was deleted since (by AKS, for a disruptive goal) and registered
	// again by the kubelet, so for the table it is gone.
	NodeUID string `json:"nodeUid,omitempty"`
}

// Line is the record in one line, as status shows it.
func (r GoalRecord) Line() string {
	s := fmt.Sprintf("goal %s (applied eTag %s, Kubernetes %s) at %s: %s", r.Decision, orNone(r.ETag), orNone(r.Applied.Version), r.At.Format(time.RFC3339), r.Reason)
	if r.Error != "" {
		s += "; last error: " + strings.TrimSpace(r.Error)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// LoadGoalRecord reads the record at p (a path this process opens).
func LoadGoalRecord(p string) (GoalRecord, error) {
	var r GoalRecord
	data, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", p, err)
	}
	return r, nil
}

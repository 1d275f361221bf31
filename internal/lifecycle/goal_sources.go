package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machineapi"
)

// Goal is the config a start runs: the config file with the cluster's
// goal over it (design decision 11: for the fields a cluster source
// sets, the cluster wins over the file), and where each value the file
// does not decide came from.
//
// The order is file < AKS Machine goal < rollout release. Both cluster
// sources at once is refused (GoalConflictError): a node whose config
// names an AKS Machine is managed through ARM and never takes part in an
// in-cluster rollout (the agent reports it ManagedElsewhere), so a
// rollout release on such a node is a leftover an operator must resolve,
// not something start can rank.
type Goal struct {
	Config  *config.Config `json:"-"`
	Sources []GoalSource   `json:"sources,omitempty"`
}

// GoalSource is one config key the cluster's goal set.
type GoalSource struct {
	Key   string `json:"key"`   // the key's JSON path, e.g. components.kubernetes
	Value string `json:"value"` // the value start runs
	From  string `json:"from"`  // "rollout r1 generation 2", "AKS Machine eTag ..."
	File  string `json:"file"`  // what the config file says
}

// String is start's line for s: "components.kubernetes 1.35.4 from
// rollout r1 generation 2 (the config file says 1.34.2)".
func (s GoalSource) String() string {
	if s.Value == s.File {
		return fmt.Sprintf("%s %s from %s (the config file says the same)", s.Key, noneIfEmpty(s.Value), s.From)
	}
	return fmt.Sprintf("%s %s from %s (the config file says %s)", s.Key, noneIfEmpty(s.Value), s.From, noneIfEmpty(s.File))
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// goalKeys are the config keys a cluster source may set, each as start
// prints its value.
var goalKeys = map[string]func(*config.Config) string{
	"components.kubernetes":             func(c *config.Config) string { return c.Components.Kubernetes },
	"bootstrap.offlineArtifacts.source": func(c *config.Config) string { return c.Bootstrap.OfflineArtifacts.Source },
	"bootstrap.ociImage":                func(c *config.Config) string { return c.Bootstrap.OCIImage },
	"node.maxPods":                      func(c *config.Config) string { return strconv.Itoa(c.Node.MaxPods) },
	"node.labels": func(c *config.Config) string {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(c.Node.Labels)) {
			kv = append(kv, k+"="+c.Node.Labels[k])
		}
		return strings.Join(kv, ",")
	},
	"node.taints":                       func(c *config.Config) string { return strings.Join(c.Node.Taints, ",") },
	"node.kubelet.imageGCHighThreshold": func(c *config.Config) string { return strconv.Itoa(c.Node.Kubelet.ImageGCHighThreshold) },
	"node.kubelet.imageGCLowThreshold":  func(c *config.Config) string { return strconv.Itoa(c.Node.Kubelet.ImageGCLowThreshold) },
}

func goalSource(key, from string, file, goal *config.Config) GoalSource {
	return GoalSource{Key: key, From: from, Value: GoalValue(goal, key), File: GoalValue(file, key)}
}

// GoalValue is the value of key, one a cluster source may set, in c, as
// start prints it; "" for another key.
func GoalValue(c *config.Config, key string) string {
	if get, ok := goalKeys[key]; ok {
		return get(c)
	}
	return ""
}

// LoadGoal is file with the cluster's goal over it, from what the agent
// recorded in l's state dir: the AKS Machine's settings the follow-machine
// loop applied (layout.MachineGoal, only when file names an AKS Machine),
// then the release a rollout moved the node to (layout.RolloutRecord).
// No record is no goal: file as it is. A record that cannot be read is an
// error naming it and what to do: ignoring it would repave a node the
// cluster moved back to the file's older values.
func LoadGoal(l layout.Layout, file *config.Config) (Goal, error) {
	g := Goal{Config: file}
	rec, err := fleet.LoadRecord(l.OnRoot(l.RolloutRecord()))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return g, fmt.Errorf("read the rollout record %s: %w: it records the release a rollout moved this node to; repair it, or remove it and set the config file's components.kubernetes, bootstrap.ociImage and bootstrap.offlineArtifacts.source to what the node runs (aks-flex-node status shows the active machine's version and image)", l.RolloutRecord(), err)
	}
	// A malformed resource ID is config validation's and preflight's to
	// report; the node is managed through ARM all the same.
	id, arm, idErr := machineapi.IDFromConfig(file)
	if arm {
		if rec.Applied != nil {
			machine := file.Azure.TargetCluster.ResourceID + "/agentPools/.../machines/" + file.Agent.NodeName
			if idErr == nil {
				machine = id.String()
			}
			return g, &GoalConflictError{Machine: machine, MachineGoal: l.MachineGoal(), RolloutRecord: l.RolloutRecord(), Release: rec.Applied.From()}
		}
		if err := g.overlayMachine(l, file); err != nil {
			return g, err
		}
	}
	if rec.Applied != nil {
		c, src := rec.Applied.Overlay(g.Config)
		for _, s := range src {
			g.Sources = append(g.Sources, goalSource(s.Key, s.From, file, c))
		}
		g.Config = c
	}
	return g, g.validate(file)
}

// validate refuses a goal that makes the config invalid (decision 10:
// cluster data is input to validate, never trusted configuration: a
// version is interpolated into the bundle source's path, an image is
// unpacked). Only the problems the goal brings count; the file's own
// were config loading's to report.
func (g Goal) validate(file *config.Config) error {
	if len(g.Sources) == 0 {
		return nil
	}
	had := map[string]bool{}
	for _, e := range config.Validate(file) {
		had[e.Error()] = true
	}
	var bad []string
	for _, e := range config.Validate(g.Config) {
		if !had[e.Error()] {
			bad = append(bad, e.Error())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	var from []string
	for _, s := range g.Sources {
		from = append(from, s.Key+" from "+s.From)
	}
	return fmt.Errorf("the cluster's goal (%s) makes the config invalid: %s; fix the rollout's release or the AKS Machine, whose record the agent then rewrites", strings.Join(from, ", "), strings.Join(bad, "; "))
}

// overlayMachine puts the AKS Machine's settings the agent applied over
// g's config; none before the agent followed the Machine once (start's
// registration makes the Machine from the file then).
func (g *Goal) overlayMachine(l layout.Layout, file *config.Config) error {
	rec, err := machineapi.LoadGoalRecord(l.OnRoot(l.MachineGoal()))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("read the AKS Machine goal record %s: %w: it records the settings the agent applied from the AKS Machine; remove it and restart aks-flex-node-agent.service, whose follow-machine loop writes it again from the Machine, before running start", l.MachineGoal(), err)
	}
	s := rec.Applied
	from := "AKS Machine eTag " + noneIfEmpty(rec.ETag)
	c := s.Overlay(g.Config)
	keys := []string{"node.labels", "node.taints"}
	if s.Version != "" {
		keys = append([]string{"components.kubernetes"}, keys...)
	}
	if s.MaxPods > 0 {
		keys = append(keys, "node.maxPods")
	}
	if s.ImageGCHighThreshold > 0 {
		keys = append(keys, "node.kubelet.imageGCHighThreshold", "node.kubelet.imageGCLowThreshold")
	}
	for _, k := range keys {
		g.Sources = append(g.Sources, goalSource(k, from, file, c))
	}
	g.Config = c
	return nil
}

// GoalConflictError is a node whose config names an AKS Machine (its goal
// comes from ARM) and whose rollout record holds a release a rollout
// moved it to: start cannot tell which the operator meant.
type GoalConflictError struct {
	Machine       string // the AKS Machine's resource ID
	MachineGoal   string // layout.MachineGoal
	RolloutRecord string // layout.RolloutRecord
	Release       string // "rollout r1 generation 2"
}

func (e *GoalConflictError) Error() string {
	return fmt.Sprintf("two cluster goals for this node: the config names AKS Machine %s (azure.targetCluster.resourceId; the agent records its goal in %s) and %s records the release of %s; "+
		"a node managed through ARM never takes part in a rollout: remove azure.targetCluster.resourceId from the config to keep the rollout's release, "+
		"or remove %s to follow the AKS Machine (and the rollout's nodeSelector should not select this Node)",
		e.Machine, e.MachineGoal, e.RolloutRecord, e.Release, e.RolloutRecord)
}

// adoptGoal makes the cluster's goal (LoadGoal) over the config file the
// config of this start and of pf's checks, and says where each value it
// set came from, one line a key. Run calls it under the node lock: the
// agent switches a node to a release under the same lock, so the record
// read here is the release the active machine runs. A record that cannot
// be read, or two cluster goals, refuse the start before anything on the
// host changed.
func (s *Start) adoptGoal(pf *Preflight) error {
	g, err := LoadGoal(s.opts.Layout, s.opts.Config)
	if err != nil {
		return fmt.Errorf("the cluster's goal: %w; nothing was changed", err)
	}
	for _, src := range g.Sources {
		s.progressf("%s", src)
	}
	if len(g.Sources) == 0 {
		return nil
	}
	o := s.opts
	o.Config = g.Config
	ns := NewStart(o)
	ns.label, ns.goal = s.label, g
	*s = *ns
	if pf != nil && pf.Env != nil {
		pf.Env.Config = g.Config
	}
	return nil
}

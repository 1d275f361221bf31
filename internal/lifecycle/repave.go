package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/kubeclient"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// RepaveOptions are the inputs of one `node upgrade`: start's options
// (Config is the config file as it is, Machine is ignored) and what the
// repave changes.
type RepaveOptions struct {
	Options
	// KubernetesVersion is the version the other side gets.
	KubernetesVersion string
	// Image, when set, replaces bootstrap.ociImage for the other side.
	Image string
	// DrainTimeout bounds drain-node; ReadyTimeout bounds the wait for
	// the new side (and, on rollback, for the old one) to be Ready.
	DrainTimeout time.Duration
	ReadyTimeout time.Duration
	// Committed, when set, runs in the finish phase right after
	// save-state (the switch's commit point: the applied state names the
	// new side), still under the node lock: the fleet agent records the
	// release the node now runs there, so a start waiting for the lock
	// reads it (fleet.Committed). Its error is logged, not the repave's:
	// the switch is committed and the caller records it again.
	Committed func(ctx context.Context) error
	// NewClient is the API server as the node whose machine is at
	// machineRoot; nil is its own credential (node.ClientConfig).
	NewClient func(c *config.Config, l layout.Layout, machineRoot string) (kubeclient.Interface, error)
}

func (o *RepaveOptions) setDefaults() {
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 5 * time.Minute
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	if o.NewClient == nil {
		o.NewClient = func(c *config.Config, l layout.Layout, root string) (kubeclient.Interface, error) {
			cfg, err := node.ClientConfig(c, l, root)
			if err != nil {
				return nil, err
			}
			return kubeclient.New(cfg, kubeclient.Repave)
		}
	}
}

// Repave is one blue/green repave of the node: the side that does not
// serve is prepared completely with the new version while the active side
// serves, the node is cordoned and drained, the active side stops and
// hands the node's identity to the other, which starts and must be Ready
// at the new version; otherwise the old side comes back (rollback).
type Repave struct {
	opts    RepaveOptions
	applied state.Applied
	// from serves now; to is prepared and takes over.
	from, to Machine
	// start is a start of the other side with the new config: its
	// tasks, stager, provisioner and worker image are the repave's.
	start     *Start
	client    *NodeClient
	heartbeat *task.Output[time.Time]
	chosen    *task.Output[ImageChoice]
	// events records how the repave ended on the Node, with the node's
	// credential (which hand-over-identity gives both sides).
	events *events.Recorder
	// cordonedBefore says the Node was cordoned (by an operator) before
	// the drain phase cordoned it: every way the repave ends leaves it so.
	cordonedBefore bool
	// back is set on a switch back to the retained side (NewSwitchBack):
	// its phases replace stage, prepare and the new side's switch.
	back *switchBack
}

// NewRepave prepares a repave of the node applied describes (the state
// start saved) to o's version and image.
func NewRepave(o RepaveOptions, applied state.Applied) *Repave {
	o.setDefaults()
	o.Options.setDefaults()
	c := *o.Config
	c.Components.Kubernetes = o.KubernetesVersion
	if o.Image != "" {
		c.Bootstrap.OCIImage = o.Image
	}
	from := applied.ActiveMachine()
	so := o.Options
	so.Config, so.Machine = &c, o.Layout.OtherMachine(from)
	r := &Repave{opts: o, applied: applied, start: NewStart(so),
		heartbeat: task.NewOutput[time.Time]("stop-active-machine"),
		chosen:    task.NewOutput[ImageChoice]("provision-machine")}
	r.start.label = "node upgrade"
	r.from = NewMachine(o.Layout, from, o.Exec)
	r.to = r.start.machine
	oldConfig := o.Config
	r.client = &NodeClient{New: func() (kubeclient.Interface, error) {
		return o.NewClient(oldConfig, o.Layout, r.from.Root())
	}}
	r.events = events.New(o.Config.Agent.NodeName, r.client.Get, o.Log)
	return r
}

// From and To are the side that serves and the side the repave prepares.
func (r *Repave) From() string { return r.from.Name }
func (r *Repave) To() string   { return r.to.Name }

// Stager is the new side's bundle stager (preflight's checks verify
// through it).
func (r *Repave) Stager() *artifact.Stager { return r.start.stager }

// Phases are the repave's phases after preflight, for a host in cgroup
// mode ("v1" or "v2"). Until switch's first task the active side serves
// untouched; a failure in switch rolls back (RollbackPhase).
func (r *Repave) Phases(cgroupMode string) []task.Phase {
	if r.back != nil {
		return r.backPhases(cgroupMode)
	}
	s, o := r.start, r.opts
	c, h, m := s.opts.Config, s.host, r.to
	name := c.Agent.NodeName
	staged := task.NewOutput[artifact.Staged]("stage-node-components")
	components := task.NewOutput[bool]("install-node-components")
	nodeConfig := task.NewOutput[bool]("write-node-config")
	nodeSums := task.NewOutput[map[string]string]("write-node-config")
	nspawnFiles := task.NewOutput[bool]("write-nspawn-files")
	nspawnOpts := machine.Options{AdditionalHostDevices: c.Bootstrap.AdditionalHostDevices, CgroupMode: cgroupMode, Binds: IdentityBinds(o.Layout, c)}
	return []task.Phase{
		{Name: "stage", Tasks: []task.Task{
			StageNodeComponents(s.stager, staged),
		}},
		{Name: "prepare", Tasks: []task.Task{
			StopOtherMachine(m),
			ProvisionMachine(h, m, s.provisioner, s.image, staged, r.chosen, o.Log),
			InstallNodeComponents(s.stager, staged, components),
			WriteNspawnFiles(h, m, nspawnOpts, nspawnFiles),
			WriteNodeConfig(m, c, cgroupMode, nodeConfig, nodeSums),
		}},
		r.drainPhase(),
		{Name: "switch", Tasks: []task.Task{
			StopActiveMachine(r.from, r.client, name, r.heartbeat),
			HandOverIdentity(r.from, m),
			WritePodNetwork(m, c, o.ReadyTimeout, s.nodeProgress),
			StartMachine(m, nspawnFiles, components, nodeConfig),
			ImportImages(m),
			WaitNodeVersion(m, r.client, name, c.Components.Kubernetes, o.ReadyTimeout, r.heartbeat, s.nodeProgress),
		}},
		{Name: "finish", Tasks: r.afterCommit(
			SaveState(h, m, c, o.ConfigFile, o.ConfigData, r.chosen, nodeSums),
			r.uncordon(),
		)},
	}
}

// afterCommit is the finish phase's tasks: save-state (the commit), the
// caller's record-commit when it set Committed, then the rest.
func (r *Repave) afterCommit(save task.Task, rest ...task.Task) []task.Task {
	out := []task.Task{save}
	if f := r.opts.Committed; f != nil {
		out = append(out, task.Func{N: "record-commit", F: func(ctx context.Context) (task.Result, error) {
			if err := f(ctx); err != nil {
				r.opts.Log.Warn("record the committed switch; the caller records it once the repave returns", "error", err)
				return task.Result{Detail: "not recorded: " + err.Error()}, nil
			}
			return task.Result{Changed: true}, nil
		}})
	}
	return append(out, rest...)
}

// drainPhase cordons and drains the Node, for a repave and a switch back.
func (r *Repave) drainPhase() task.Phase {
	name := r.opts.Config.Agent.NodeName
	return task.Phase{Name: "drain", Tasks: []task.Task{
		CordonNode(r.client, name, true),
		DrainNode(r.client, name, r.opts.DrainTimeout, r.opts.Drain),
	}}
}

// SwitchPhase is the phase whose failure rolls a repave back: the active
// side has stopped by its first task.
const SwitchPhase = "switch"

// RollbackPhase brings the old side back after the new one failed: the
// new side stopped (kept on disk for inspection), the old one started
// and Ready at its own version, the node uncordoned (unless it was
// cordoned before the repave).
func (r *Repave) RollbackPhase() task.Phase {
	name := r.opts.Config.Agent.NodeName
	hb := task.NewOutput[time.Time]("stop-new-machine")
	noReboot := task.NewOutput[bool]("")
	noReboot.Set(false)
	return task.Phase{Name: "rollback", Tasks: []task.Task{
		StopNewMachine(r.to, r.client, name, hb),
		StartMachine(r.from, noReboot),
		WaitNodeVersion(r.from, r.client, name, r.applied.KubernetesVersion, r.opts.ReadyTimeout, hb, r.start.nodeProgress),
		r.uncordon(),
	}}
}

// uncordon is uncordon-node for the repave's ends: a Node cordoned before
// the repave stays cordoned.
func (r *Repave) uncordon() task.Task {
	return UncordonUnlessCordonedBefore(r.client, r.opts.Config.Agent.NodeName, func() bool { return r.cordonedBefore })
}

// DescribeRepave lists the repave's phases and tasks, one phase a line,
// for help text: the list is the code's.
func DescribeRepave() string {
	r := NewRepave(RepaveOptions{Options: Options{Config: &config.Config{}}}, state.Applied{Machine: layout.MachineBlue})
	var b strings.Builder
	fmt.Fprintf(&b, "  %-10s %s\n", PreflightPhase, "the checks "+strings.Join(preflight.RepaveNames, ", ")+"; any error refuses before anything changes")
	for _, p := range append(r.Phases("v2"), r.RollbackPhase()) {
		fmt.Fprintf(&b, "  %-10s %s\n", p.Name, strings.Join(p.Names(), ", "))
	}
	return b.String()
}

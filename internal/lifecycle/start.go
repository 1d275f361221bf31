package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// Options are the inputs of one start or reset.
type Options struct {
	Layout     layout.Layout
	Config     *config.Config // start only
	ConfigFile string         // host path
	ConfigData []byte
	Log        *slog.Logger
	Progress   io.Writer // the command's own lines; nil for none
	// Observer, when set, is told each task as it runs (a display on a
	// terminal, see internal/progress): it replaces the "[start] <task>
	// ..." lines, and the waits report to it.
	Observer    task.Observer
	Exec        Runner // host commands; nil runs them for real
	ProcDir     string // default /proc
	Machine     string // default the layout's active machine
	JoinTimeout time.Duration
	// DrainTimeout bounds the drain of a start that repaves (the config
	// names another version or worker image than the active machine
	// runs); zero is RepaveOptions' default.
	DrainTimeout time.Duration
	// Drain is kubectl drain's opt-ins for a repave's drain (start that
	// repaves, node upgrade): without them the drain refuses DaemonSet
	// pods, pods no controller manages and pods with emptyDir data.
	Drain drain.Options
	// KeepImageCache keeps the layer cache on reset.
	KeepImageCache bool
	// Now is the clock durations are measured with; nil means time.Now.
	Now func() time.Time
	// Lock is how long to wait for the node lock when another command
	// holds it, and whom to tell; the zero value fails at once.
	Lock nodelock.Wait
	// MachineClient makes the AKS Machine's client (register-machine);
	// nil is DefaultMachineClient.
	MachineClient MachineClientFunc
}

func (o *Options) setDefaults() {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.JoinTimeout == 0 {
		o.JoinTimeout = 5 * time.Minute
	}
	if o.Machine == "" {
		o.Machine = layout.MachineBlue
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MachineClient == nil {
		o.MachineClient = DefaultMachineClient(o.Layout.Root())
	}
}

// WantComponents are the versions config c asks a bundle for.
func WantComponents(c *config.Config) artifact.Components {
	return artifact.Components{Kubernetes: c.Components.Kubernetes, Containerd: c.Components.Containerd, Runc: c.Components.Runc, CNI: c.Networking.CNIVersion,
		KubeProxy: c.Networking.AgentKubeProxy()}
}

// Start is one run of start: its options and what its tasks share, none
// of it a task's result: the host and machine they act on, the tracker,
// the stager that hashes the bundle once for preflight, stage and
// install, and the provisioner that resolves the worker image once for
// preflight and provision-machine.
type Start struct {
	opts        Options
	host        Host
	machine     Machine
	stager      *artifact.Stager
	provisioner *machine.Provisioner
	image       *WorkerImage
	// client is the API server as the node sees it, made once its
	// credential is in the machine (wait-node-ready).
	client *NodeClient
	// events records the join on the Node, as the node.
	events *events.Recorder
	// label prefixes the progress lines: the command's name.
	label string
	// goal is the cluster's goal start adopted over the config file
	// (adoptGoal), under the node lock.
	goal Goal
}

// NewStart prepares a start with o. o.Config must be set.
func NewStart(o Options) *Start {
	o.setDefaults()
	tr := NewTracker(o.Layout)
	s := &Start{
		opts:    o,
		host:    Host{Layout: o.Layout, ProcDir: o.ProcDir, Exec: o.Exec, Tracker: tr},
		machine: NewMachine(o.Layout, o.Machine, o.Exec),
		label:   "start",
	}
	c := o.Config
	s.stager = &artifact.Stager{
		Layout:      o.Layout,
		Source:      c.Bootstrap.OfflineArtifacts.Source,
		PlainHTTP:   c.Bootstrap.OfflineArtifacts.PlainHTTP,
		Want:        WantComponents(c),
		MachineRoot: s.machine.Root(),
		Track:       tr.Add,
		Log:         o.Log,
	}
	needs := ImageNeeds(c)
	s.provisioner = &machine.Provisioner{PlainHTTP: c.Bootstrap.OCIImagePlainHTTP, Keychain: authn.DefaultKeychain, Needs: &needs}
	s.image = NewWorkerImage(c.Bootstrap.OCIImage, s.stager, o.Layout)
	s.events = events.ForMachine(c, o.Layout, s.machine.Root, c.Agent.NodeName, o.Log)
	s.client = nodeClientFor(c, o.Layout, s.machine.Root)
	return s
}

// Stager is the run's bundle stager: preflight's artifact-sources check
// verifies through it, so stage and install do not hash the bundle again.
func (s *Start) Stager() *artifact.Stager { return s.stager }

// Phases are start's phases after preflight, for a host in cgroup mode
// ("v1" or "v2"). Their order, and the outputs passed from task to task,
// are the dependencies between them.
func (s *Start) Phases(cgroupMode string) []task.Phase {
	c, h, m := s.opts.Config, s.host, s.machine
	staged := task.NewOutput[artifact.Staged]("stage-node-components")
	components := task.NewOutput[bool]("install-node-components")
	nodeConfig := task.NewOutput[bool]("write-node-config")
	nodeSums := task.NewOutput[map[string]string]("write-node-config")
	nspawnFiles := task.NewOutput[bool]("write-nspawn-files")
	chosen := task.NewOutput[ImageChoice]("provision-machine")
	registration := task.NewOutput[machineapi.Record]("register-machine")
	nspawnOpts := machine.Options{AdditionalHostDevices: c.Bootstrap.AdditionalHostDevices, CgroupMode: cgroupMode, Binds: IdentityBinds(s.opts.Layout, c)}
	return []task.Phase{
		{Name: "register", Tasks: []task.Task{
			RegisterMachine(c, s.opts.MachineClient, registration, s.warnf, s.opts.Now),
		}},
		{Name: "stage", Tasks: []task.Task{
			StageNodeComponents(s.stager, staged),
		}},
		{Name: "host", Tasks: []task.Task{
			CreateLayoutDirs(h),
			LoadKernelModules(h),
			ApplySysctls(h),
			DisableSwap(h),
			RecordHostNetwork(h),
			ApplyHostRoutes(h, c),
		}},
		{Name: "machine", Tasks: []task.Task{
			ProvisionMachine(h, m, s.provisioner, s.image, staged, chosen, s.opts.Log),
			InstallNodeComponents(s.stager, staged, components),
			SeedAgentSlots(h),
			WriteIdentity(h, c),
			WriteNspawnFiles(h, m, nspawnOpts, nspawnFiles),
			WriteNodeConfig(m, c, cgroupMode, nodeConfig, nodeSums),
			StartMachine(m, nspawnFiles, components, nodeConfig),
			ImportImages(m),
		}},
		{Name: "join", Tasks: []task.Task{
			WaitTLSBootstrap(m, c, s.opts.JoinTimeout),
			WritePodNetwork(m, c, s.opts.JoinTimeout, s.nodeProgress),
			WaitNodeReady(m, s.client, c.Agent.NodeName, c.Networking.ClusterCNI(), s.opts.JoinTimeout, s.nodeProgress),
		}},
		{Name: "finish", Tasks: []task.Task{
			SaveState(h, m, c, s.opts.ConfigFile, s.opts.ConfigData, chosen, nodeSums),
			InstallAgentService(h, s.opts.Log),
			RecordMachineRegistration(h, registration),
			WriteJoinedMarker(h, c.Agent.NodeName),
		}},
	}
}

// Run runs start under the node lock: the preflight phase, which refuses
// (a *RefusedError) before anything on the host changes, then the phases
// of tasks. Preflight runs under the lock too, so what it saw is what the
// tasks find. On a joined node whose config names another Kubernetes
// version or worker image than the active machine runs, the phases are a
// repave's (repaveDue), as node upgrade runs them. The config compared
// and run is the file's with the cluster's goal over it (adoptGoal), read
// under the lock, so a release the agent switched the node to is never
// repaved back to the file's older values.
func (s *Start) Run(ctx context.Context, pf Preflight) (changed bool, err error) {
	start := s.opts.Now()
	if s.opts.Observer != nil {
		ctx = task.WithObserver(ctx, s.opts.Observer)
	}
	lock, err := nodelock.Acquire(ctx, s.opts.Layout, "start", s.opts.Lock)
	if err != nil {
		return false, err
	}
	defer lock.Release()
	// A start or repave killed mid-write left its pending state files.
	if err := state.Open(s.opts.Layout).RemovePending(); err != nil {
		return false, err
	}
	if err := s.adoptGoal(&pf); err != nil {
		return false, err
	}
	if r, why := s.repaveDue(ctx); r != nil {
		return s.runRepave(ctx, r, why, pf, start)
	}
	if err := s.preflight(ctx, pf); err != nil {
		return false, err
	}
	mode, err := machine.HostCgroupMode(s.opts.Layout.Root())
	if err != nil {
		return false, fmt.Errorf("detect cgroup mode: %w", err)
	}
	return s.runPhases(ctx, s.Phases(mode), start)
}

// runPhases runs start's phases after preflight, with what the run shows
// along the way and at the end; start is when the run began.
func (s *Start) runPhases(ctx context.Context, phases []task.Phase, start time.Time) (changed bool, err error) {
	store := metrics.OpenStore(s.opts.Layout)
	r := &task.Runner{Log: s.opts.Log, Now: s.opts.Now, Observer: task.Observers(s.opts.Observer, metrics.TaskErrors(store))}
	if s.opts.Observer == nil {
		r.Starting = func(name string) { s.progressf("%s ...", name) }
	}
	changed, err = r.Phases(ctx, phases...)
	if err != nil {
		return changed, err
	}
	name := s.opts.Config.Agent.NodeName
	if d, err := machine.ImageDigest(s.opts.Layout, s.machine.Name); err == nil && d != "" {
		s.progressf("machine %s runs worker image %s (%s, from %s)", s.machine.Name, s.image.Used().Ref, d, s.image.Used().Source)
	}
	took := s.opts.Now().Sub(start).Round(time.Millisecond)
	// Bundle bytes hashed are counted, not estimated: a converged run
	// should hash none (the bundle's verification record,
	// artifact/record.go).
	hashed := artifact.BytesHashed()
	if changed {
		// Best effort, like every metric: a join is not undone because
		// its duration could not be recorded.
		_ = store.Observe(metrics.OpJoin, nil, took)
		_ = s.events.Normal(ctx, events.ReasonJoined, "aks-flex-node joined this node in %v: machine %s, Kubernetes %s, worker image %s",
			took, s.machine.Name, s.opts.Config.Components.Kubernetes, s.image.Used().Ref)
		s.progressf("node %s joined in %v (%d bytes hashed)", name, took, hashed)
	} else {
		s.progressf("node %s already joined: nothing changed (%v, %d bytes hashed)", name, took, hashed)
	}
	if s.opts.Config.Networking.ClusterCNI() {
		if p, err := node.LoadedCNIConfig(s.machine.Root()); err == nil && p == "" {
			s.progressf("node %s waits for the cluster's CNI (networking.mode cluster): it is not Ready until the CNI's DaemonSet pod writes its config into %s in machine %s", name, node.CNIConfDir, s.machine.Name)
		}
	}
	return changed, nil
}

// nodeProgress is told each new state wait-node-ready sees: a line of its
// own, or on a display what the wait waits for.
func (s *Start) nodeProgress(state string) {
	if w, ok := s.opts.Observer.(task.Waiter); ok {
		w.Waiting(fmt.Sprintf("Node %s to be Ready (%s)", s.opts.Config.Agent.NodeName, state))
		return
	}
	s.progressf("  %s", state)
}

// warnf is a warning: a progress line and a log line.
func (s *Start) warnf(format string, args ...any) {
	s.opts.Log.Warn(fmt.Sprintf(format, args...))
	s.progressf(format, args...)
}

func (s *Start) progressf(format string, args ...any) {
	if s.opts.Progress != nil {
		fmt.Fprintf(s.opts.Progress, "["+s.label+"] "+format+"\n", args...)
	}
}

// DescribeStart lists start's phases and their tasks, one phase a line,
// for help text: the list is the code's, so it cannot drift from it.
func DescribeStart() string {
	s := NewStart(Options{Config: &config.Config{}})
	var b strings.Builder
	fmt.Fprintf(&b, "  %-10s %s\n", PreflightPhase, "the preflight checks; any error refuses before the host changes")
	for _, p := range s.Phases("v2") {
		fmt.Fprintf(&b, "  %-10s %s\n", p.Name, strings.Join(p.Names(), ", "))
	}
	return b.String()
}

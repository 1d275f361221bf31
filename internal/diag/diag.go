// Package diag owns `aks-flex-node debug`: the read-only checks of a
// joined node (one file each, named like preflight's and reported the
// same way: [OK], [WARNING] and [ERROR] with a remedy), what they look at
// (the probes: the API server as the node, systemd's units on the host
// and in the machine, the machine's files), and the debug report.
//
// Debug changes nothing, on the host or in the cluster. It talks to the
// API server named in the config with the node's own credential (the
// kubelet's client certificate in the machine), so it sees what the kubelet sees
// and may do what the kubelet may do; it reads the machine's files
// confined to the machine's root (internal/fsutil's ...In functions and
// internal/fsroot), never through links a running machine could point at
// the host.
package diag

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Check names are public, like preflight's: scripts read them from JSON.
const (
	NameJoined           = "joined"
	NameAPIServer        = "api-server"
	NameClientCert       = "client-certificate"
	NameClockSkew        = "clock-skew"
	NameMachine          = "machine"
	NameContainerd       = "containerd"
	NameKubelet          = "kubelet"
	NameNodeConditions   = "node-conditions"
	NameCNI              = "cni"
	NameDiskPressure     = "disk-pressure"
	NameAgent            = "agent"
	NameAKSMachine       = "aks-machine"
	NameRollout          = "rollout"
	defaultProbeTimeout  = 5 * time.Second
	defaultOverallBudget = 20 * time.Second
)

// Names are the checks of a joined node, in report order.
var Names = []string{NameJoined, NameAPIServer, NameClientCert, NameClockSkew, NameMachine, NameContainerd, NameKubelet,
	NameNodeConditions, NameCNI, NameDiskPressure, NameAgent, NameAKSMachine, NameRollout}

// Env is what the checks look at. The zero values of the optional fields
// are the running host's.
type Env struct {
	Layout layout.Layout
	// Config is the node's config when it could be read: it names the API
	// server and its CA (see node.ClientConfig); nil reaches no API server.
	Config *config.Config
	// Exec runs systemctl, machinectl and nsenter; nil runs them.
	Exec hostos.Runner
	// ProcDir is the host's /proc (routes of the machine's network
	// namespace are read there); "" is /proc.
	ProcDir string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// ProbeTimeout bounds each network probe; 0 is 5 s.
	ProbeTimeout time.Duration

	once struct {
		applied, api, units, leader, kubelet sync.Once
	}
	applied    *state.Applied
	appliedErr error
	apiRes     apiProbe
	unitsRes   unitsProbe
	leader     int
	leaderErr  error
	kubelet    kubeletProbe
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Env) control() *machine.Control { return &machine.Control{Run: e.Exec} }

func (e *Env) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if e.Exec != nil {
		return e.Exec(ctx, name, args...)
	}
	return hostos.Exec(ctx, name, args...)
}

func (e *Env) probeTimeout() time.Duration {
	if e.ProbeTimeout > 0 {
		return e.ProbeTimeout
	}
	return defaultProbeTimeout
}

func (e *Env) procDir() string {
	if e.ProcDir != "" {
		return e.ProcDir
	}
	return "/proc"
}

// Applied is what start recorded: the node, its machine, the versions.
// (nil, nil) on a host that never joined.
func (e *Env) Applied() (*state.Applied, error) {
	e.once.applied.Do(func() {
		e.applied, e.appliedErr = state.Open(e.Layout).Applied()
	})
	return e.applied, e.appliedErr
}

// nodeName and machineName are the applied state's; callers run after
// the joined check, so the state is there.
func (e *Env) nodeName() string {
	if a, _ := e.Applied(); a != nil {
		return a.NodeName
	}
	return ""
}

func (e *Env) machineName() string {
	a, _ := e.Applied()
	return a.ActiveMachine()
}

// machineRoot is the machine's rootfs as this process opens it.
func (e *Env) machineRoot() string { return e.Layout.OnRoot(e.Layout.MachineDir(e.machineName())) }

// machineLeader is the host PID of the machine's init.
func (e *Env) machineLeader(ctx context.Context) (int, error) {
	e.once.leader.Do(func() { e.leader, e.leaderErr = e.control().Leader(ctx, e.machineName()) })
	return e.leader, e.leaderErr
}

// Report is the outcome of debug.
type Report struct {
	Node    string `json:"node"`
	Machine string `json:"machine"`
	Server  string `json:"server,omitempty"`
	Took    string `json:"took"`
	Joined  bool   `json:"joined"`
	Skipped string `json:"skipped,omitempty"`
	preflight.Report
}

// Checks are the checks of a joined node, in report order.
func Checks(e *Env) []preflight.Check {
	return []preflight.Check{
		checkJoined(e), checkAPIServer(e), checkClientCert(e), checkClockSkew(e), checkMachine(e),
		checkContainerd(e), checkKubelet(e), checkNodeConditions(e), checkCNI(e), checkDiskPressure(e), checkAgent(e),
		checkAKSMachine(e), checkRollout(e),
	}
}

// Run runs the checks (at once, each waiting for the probes it shares)
// and reports them in order. On a host that has not joined only the
// joined check runs: the others would all say the same.
func Run(ctx context.Context, e *Env) Report {
	began := e.now()
	ctx, cancel := context.WithTimeout(ctx, defaultOverallBudget)
	defer cancel()
	rep := Report{}
	checks := Checks(e)
	if a, err := e.Applied(); err != nil || a == nil || !e.joinedMarker() {
		checks = checks[:1]
		rep.Skipped = "the other checks need a joined node"
	} else {
		rep.Joined, rep.Node, rep.Machine = true, a.NodeName, e.machineName()
	}
	rep.Report = preflight.Run(ctx, checks, preflight.Options{})
	if rep.Joined {
		rep.Server = e.apiServer(ctx).server
	}
	rep.Took = e.now().Sub(began).Round(time.Millisecond).String()
	return rep
}

// Failed says whether any check found an error: debug then exits 1.
func (r Report) Failed() bool { return r.Summary.Errors > 0 }

// unitHint is how to read a unit's log inside a machine from the host.
func (e *Env) unitHint(unit string) string {
	return fmt.Sprintf("journalctl -D %s/var/log/journal -u %s", e.Layout.MachineDir(e.machineName()), unit)
}

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// newMachineFollower is the agent's follower of config c's AKS Machine;
// nil when c has none (no target cluster, not in-cluster mode: nothing
// talks to ARM then).
func newMachineFollower(c *config.Config, l layout.Layout, log *slog.Logger, k *MachineKeeper, client func() (kubeclient.Interface, error), nodes *NodeInformer, interval time.Duration) *MachineFollower {
	if !c.HasMachine() {
		return nil
	}
	backend := armClient(c, l)
	if c.Agent.MachineClient.InCluster() {
		backend = inClusterClient(c, l)
	}
	return &MachineFollower{Keeper: k, Config: c, Client: client, Nodes: nodes, Interval: interval,
		ARM:    backend,
		Repave: repaveTo(l, log),
		Reset:  func(ctx context.Context) error { return startDeletionReset(ctx, l) },
	}
}

// armClient makes the Machine's client once and keeps it: the client
// holds its ARM token while it is fresh. The token is never written to
// the identity dir, which the machine mounts: an ARM token is the
// agent's, not the kubelet's.
func armClient(c *config.Config, l layout.Layout) func() (machineapi.Backend, error) {
	var mu sync.Mutex
	var cl *machineapi.Client
	read := identity.ReadSecretFile(l.Root())
	return func() (machineapi.Backend, error) {
		mu.Lock()
		defer mu.Unlock()
		if cl != nil {
			return cl, nil
		}
		made, _, err := machineapi.FromConfig(c, func(s identity.Spec) machineapi.TokenSource { return &identity.Source{Spec: s} }, read)
		if err != nil {
			return nil, err
		}
		cl = made
		return cl, nil
	}
}

// inClusterClient is the Machine's client in in-cluster mode: the
// node's own credential, read from the active machine at each call (a
// repave switches the machine), to the API server at the config's
// endpoint path.
func inClusterClient(c *config.Config, l layout.Layout) func() (machineapi.Backend, error) {
	return func() (machineapi.Backend, error) {
		cfg, err := node.ClientConfig(c, l, l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())))
		if err != nil {
			return nil, fmt.Errorf("in-cluster AKS Machine: the node's credential: %w", err)
		}
		hc, err := kubeclient.HTTPClient(cfg, kubeclient.AgentLoop)
		if err != nil {
			return nil, fmt.Errorf("in-cluster AKS Machine: %w", err)
		}
		ic, err := machineapi.NewInCluster(machineapi.InClusterOptions{Server: cfg.Host, HTTPClient: hc, Endpoint: c.Agent.MachineClient.Endpoint(), Name: c.Agent.NodeName})
		if err != nil {
			return nil, err
		}
		return ic, nil
	}
}

// repaveTo is the existing blue/green repave (lifecycle.Repave, as node
// upgrade runs it: preflight against the new side, drain, switch, and
// the rollback) to config c. It takes the node lock at once or fails
// with the holder (*nodelock.HeldError), and never waits for it.
func repaveTo(l layout.Layout, log *slog.Logger) func(ctx context.Context, c *config.Config) error {
	return func(ctx context.Context, c *config.Config) error {
		r, pf, err := newRepave(l, log, c, repaveSettings{Loop: followMachineLoop})
		if err != nil {
			return err
		}
		_, err = r.Run(ctx, pf)
		return err
	}
}

// repaveSettings are what a loop sets on its repave beyond the config.
type repaveSettings struct {
	// Loop names the repave's log lines.
	Loop string
	// DrainTimeout bounds the drain; 0 is the repave's default.
	DrainTimeout time.Duration
	// Drain is the drain's opt-ins.
	Drain drain.Options
	// Observer is told each phase and task.
	Observer task.Observer
	// Nodes, when set, serves the repave's reads of the node's own Node
	// that a possibly stale answer will do (cachedReads).
	Nodes *NodeInformer
}

// newRepave is the repave of the joined node to config c (the config
// file's bytes recorded as it is) and its preflight, as node upgrade
// makes them.
func newRepave(l layout.Layout, log *slog.Logger, c *config.Config, s repaveSettings) (*lifecycle.Repave, lifecycle.Preflight, error) {
	o, applied, pf, err := repaveOptions(l, log, c, s)
	if err != nil {
		return nil, pf, err
	}
	return lifecycle.NewRepave(o, *applied), pf, nil
}

// repaveOptions are the options, the applied state and the preflight of
// a repave (or a switch back) of the joined node to config c.
func repaveOptions(l layout.Layout, log *slog.Logger, c *config.Config, s repaveSettings) (lifecycle.RepaveOptions, *state.Applied, lifecycle.Preflight, error) {
	applied, err := state.Open(l).Applied()
	if err != nil {
		return lifecycle.RepaveOptions{}, nil, lifecycle.Preflight{}, err
	}
	if applied == nil {
		return lifecycle.RepaveOptions{}, nil, lifecycle.Preflight{}, fmt.Errorf("this host has not joined (no %s/%s)", l.StateDir(), state.AppliedFile)
	}
	data, err := os.ReadFile(l.OnRoot(l.ConfigFile()))
	if err != nil {
		return lifecycle.RepaveOptions{}, nil, lifecycle.Preflight{}, err
	}
	out := logWriter{log: log, loop: s.Loop}
	o := lifecycle.RepaveOptions{
		Options: lifecycle.Options{Layout: l, Config: c, ConfigFile: l.ConfigFile(), ConfigData: data, Log: log, Progress: out,
			Observer: s.Observer, Drain: s.Drain},
		KubernetesVersion: c.Components.Kubernetes,
		DrainTimeout:      s.DrainTimeout,
	}
	if s.Nodes != nil {
		o.NewClient = repaveClient(s.Nodes)
	}
	pf := lifecycle.Preflight{Env: &preflight.Env{Root: l.Root(), ConfigFile: l.ConfigFile(), Layout: l}, Report: out}
	return o, applied, pf, nil
}

// logWriter puts the repave's own lines (its progress, its preflight
// report) in the agent's log, one log line each.
type logWriter struct {
	log  *slog.Logger
	loop string
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.log.Info(w.loop + ": " + line)
		}
	}
	return len(p), nil
}

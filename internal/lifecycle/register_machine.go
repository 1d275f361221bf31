package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/task"
)

// MachineClientFunc makes the client of the AKS Machine config c
// registers; ok is false when c names no target cluster.
type MachineClientFunc func(c *config.Config) (cl machineapi.Backend, ok bool, err error)

// DefaultMachineClient is the product's: the config's Azure identity,
// asked for each token without a cache (registration runs before start
// may write anything), through the transport policy.
func DefaultMachineClient(root string) MachineClientFunc {
	read := identity.ReadSecretFile(root)
	return func(c *config.Config) (machineapi.Backend, bool, error) {
		if c.Agent.MachineClient.InCluster() {
			ic, err := machineapi.InClusterAtStart(c)
			if err != nil {
				return nil, true, err
			}
			return ic, true, nil
		}
		cl, ok, err := machineapi.FromConfig(c, func(s identity.Spec) machineapi.TokenSource { return &identity.Source{Spec: s} }, read)
		if cl == nil {
			return nil, ok, err
		}
		return cl, ok, err
	}
}

type registerMachine struct {
	config    *config.Config
	newClient MachineClientFunc
	out       *task.Output[machineapi.Record]
	warn      func(format string, args ...any)
	now       func() time.Time
}

// RegisterMachine returns the task that registers the node as its AKS
// Machine with upstream's rule (machineapi.Register), after preflight and
// before anything on the host changes. Without azure.targetCluster.resourceId
// it does nothing and nothing talks to ARM. A failed registration refuses
// start when agent.requireMachineRegistration is true; otherwise start
// warns and joins, and the record says so.
func RegisterMachine(c *config.Config, newClient MachineClientFunc, out *task.Output[machineapi.Record], warn func(string, ...any), now func() time.Time) task.Task {
	return &registerMachine{config: c, newClient: newClient, out: out, warn: warn, now: now}
}

func (t *registerMachine) Name() string { return "register-machine" }

func (t *registerMachine) Do(ctx context.Context) (task.Result, error) {
	c := t.config
	desc, ok, idErr := machineapi.DescribeFromConfig(c)
	if !ok {
		t.out.Set(machineapi.Record{})
		return task.Result{Detail: "no azure.targetCluster.resourceId: no AKS Machine"}, nil
	}
	rec := machineapi.Record{ResourceID: desc, At: t.now().UTC()}
	reg, err := t.register(ctx, idErr)
	if err != nil {
		rec.Error, rec.Code = err.Error(), machineapi.Code(err)
		if c.Agent.RequireMachineRegistration {
			return task.Result{}, fmt.Errorf("AKS Machine registration failed and agent.requireMachineRegistration is true; nothing on the host was changed: %w", err)
		}
		t.warn("WARNING: AKS Machine not registered; the node joins without it (agent.requireMachineRegistration is false): %v", err)
		t.out.Set(rec)
		return task.Result{Detail: "not registered: " + err.Error()}, nil
	}
	rec.Outcome, rec.ETag, rec.Version = reg.Outcome, reg.ETag, reg.Machine.Version()
	t.out.Set(rec)
	return task.Result{Changed: reg.Outcome != machineapi.Adopted, Detail: fmt.Sprintf("%s %s (eTag %s)", reg.Outcome, rec.ResourceID, reg.ETag)}, nil
}

func (t *registerMachine) register(ctx context.Context, idErr error) (machineapi.Registration, error) {
	if idErr != nil {
		return machineapi.Registration{}, idErr
	}
	cl, _, err := t.newClient(t.config)
	if err != nil {
		return machineapi.Registration{}, err
	}
	return machineapi.Register(ctx, cl, machineapi.WantFromConfig(t.config))
}

type recordMachineRegistration struct {
	host Host
	in   *task.Output[machineapi.Record]
}

// RecordMachineRegistration returns the task that keeps what
// register-machine did in the state dir, for status and debug; without a
// target cluster it removes a record an earlier start left.
func RecordMachineRegistration(h Host, in *task.Output[machineapi.Record]) task.Task {
	return &recordMachineRegistration{host: h, in: in}
}

func (t *recordMachineRegistration) Name() string { return "record-machine-registration" }

func (t *recordMachineRegistration) Do(ctx context.Context) (task.Result, error) {
	rec, err := t.in.Get()
	if err != nil {
		return task.Result{}, err
	}
	l := t.host.Layout
	path := l.MachineRegistration()
	if rec.ResourceID == "" {
		changed, err := fsutil.RemoveIfExists(l.OnRoot(path))
		return task.Result{Changed: changed}, err
	}
	// The time alone changing is no change: a converged start rewrites
	// nothing.
	if old, err := LoadMachineRegistration(l.OnRoot(path)); err == nil {
		at := old.At
		old.At = rec.At
		if old == rec {
			return task.Result{Detail: "unchanged since " + at.Format(time.RFC3339)}, nil
		}
	}
	if err := t.host.track(path); err != nil {
		return task.Result{}, err
	}
	changed, err := fsutil.WriteJSON(l.OnRoot(path), rec)
	return task.Result{Changed: changed}, err
}

// LoadMachineRegistration reads the record at p (a path this process
// opens).
func LoadMachineRegistration(p string) (machineapi.Record, error) {
	var r machineapi.Record
	data, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/state"
)

// followMachineLoop names the loop in logs and as the node lock's holder.
const followMachineLoop = "follow-machine"

// MachineFollower follows the node's AKS Machine as its goal state
// (design decision 11): each pass reads the Machine from ARM, decides with
// upstream's table (machineapi.Decide) against what the node runs, and
// acts: labels and taints in place, a repave once AKS deleted the Node
// for a disruptive change, the deletion reset once the Machine is gone
// and the Node tainted, nothing while ARM fails. AKS drives disruption:
// the follower never drains on its own. What it applied and decided is
// kept in the state dir (machineapi.GoalRecord) and shown as the Node's
// FlexNodeMachine condition, in status, debug and the metrics. It also
// retries a registration that failed at start (agent.requireMachineRegistration
// false), each pass until it succeeds.
type MachineFollower struct {
	Keeper *MachineKeeper
	// Config is the config the agent loaded: the Machine registration's
	// source and the base the goal overlays.
	Config *config.Config
	// ARM is the Machine's client: ARM's, or the cluster connection's
	// in in-cluster mode (agent.machineClient.mode).
	ARM func() (machineapi.Backend, error)
	// Client is the node's own client (its credential).
	Client func() (kubeclient.Interface, error)
	// Repave runs the existing blue/green repave (and its rollback) to
	// config c, the goal over the file; it takes the node lock itself.
	Repave func(ctx context.Context, c *config.Config) error
	// Reset starts `aks-flex-node reset` outside the agent's unit.
	Reset func(ctx context.Context) error
	// Interval is the loop's; each pass starts after 0-10 % of it, so a
	// fleet does not ask ARM in lockstep. Zero waits not at all.
	Interval time.Duration
	// Now is the clock of the records; nil is time.Now.
	Now func() time.Time

	resetting bool
	// lastStatus is the status last written on the Machine (in-cluster
	// mode), nil before the first.
	lastStatus *machineapi.Status
}

// FollowMachine is the loop; it needs the API server (and ARM).
func FollowMachine(f *MachineFollower) Loop {
	return Loop{Name: followMachineLoop, Run: func(ctx context.Context) error {
		if f.Interval > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(rand.N(f.Interval/10 + 1)):
			}
		}
		return f.Follow(ctx)
	}}
}

func (f *MachineFollower) now() time.Time {
	if f.Now == nil {
		return time.Now().UTC()
	}
	return f.Now().UTC()
}

// Follow is one pass.
func (f *MachineFollower) Follow(ctx context.Context) error {
	mk := f.Keeper
	if joined, err := mk.joined(); err != nil || !joined || f.resetting {
		return err
	}
	a, err := state.Open(mk.Layout).Applied()
	if err != nil || a == nil || a.NodeName == "" || a.Machine == "" {
		return err
	}
	rec, err := f.loadGoal()
	if err != nil {
		return fmt.Errorf("%s: %w", followMachineLoop, err)
	}
	cs, err := f.Client()
	if err != nil {
		return fmt.Errorf("%s: the node's credential: %w", followMachineLoop, err)
	}
	cl, err := f.ARM()
	if err == nil {
		err = f.ensureRegistered(ctx, cl)
	}
	obs, n, nodeErr := f.observe(ctx, cl, err, cs, a.NodeName, rec)
	if nodeErr != nil {
		return fmt.Errorf("%s: get Node %s: %w", followMachineLoop, a.NodeName, nodeErr)
	}
	d := machineapi.Decide(machineapi.Applied{Settings: rec.Applied, ETag: rec.ETag}, obs)
	mk.Log.Info(d.String())
	acted, actErr := f.act(ctx, d, cs, a, n, &rec)
	if !acted {
		return actErr // nil when skipped under another command's lock: the next pass decides again
	}
	f.report(ctx, cs, n, d, &rec, errors.Join(obs.ARMError, actErr))
	f.writeStatus(ctx, cl, obs, rec)
	if obs.ARMError != nil {
		return fmt.Errorf("%s: %w", followMachineLoop, obs.ARMError)
	}
	return actErr
}

// loadGoal is the goal record; before the first one, the config's
// settings at the eTag start's registration adopted.
func (f *MachineFollower) loadGoal() (machineapi.GoalRecord, error) {
	l := f.Keeper.Layout
	rec, err := machineapi.LoadGoalRecord(l.OnRoot(l.MachineGoal()))
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return rec, err
	}
	rec = machineapi.GoalRecord{Applied: machineapi.SettingsFromConfig(f.Config)}
	if reg, err := lifecycle.LoadMachineRegistration(l.OnRoot(l.MachineRegistration())); err == nil && reg.Registered() {
		rec.ETag = reg.ETag
	}
	return rec, nil
}

// ensureRegistered retries a registration start could not make (or
// that start never tried: a record missing) with upstream's rule, and
// records the outcome where status and debug read it. nil once the
// Machine is registered.
func (f *MachineFollower) ensureRegistered(ctx context.Context, cl machineapi.Backend) error {
	l := f.Keeper.Layout
	path := l.MachineRegistration()
	old, err := lifecycle.LoadMachineRegistration(l.OnRoot(path))
	if err == nil && old.Registered() {
		return nil
	}
	rec := machineapi.Record{ResourceID: cl.Describe(), At: f.now()}
	reg, regErr := machineapi.Register(ctx, cl, machineapi.WantFromConfig(f.Config))
	if regErr != nil {
		rec.Error, rec.Code = regErr.Error(), machineapi.Code(regErr)
		f.Keeper.Log.Warn(followMachineLoop+": AKS Machine registration failed; retrying at the next interval", "machine", rec.ResourceID, "error", regErr)
	} else {
		rec.Outcome, rec.ETag, rec.Version = reg.Outcome, reg.ETag, reg.Machine.Version()
		f.Keeper.Log.Info(followMachineLoop+": AKS Machine registered by the agent", "machine", rec.ResourceID, "outcome", reg.Outcome, "eTag", reg.ETag)
	}
	if _, err := fsutil.WriteJSON(l.OnRoot(path), rec); err != nil {
		return errors.Join(regErr, fmt.Errorf("record the registration: %w", err))
	}
	if regErr != nil {
		return fmt.Errorf("AKS Machine not registered yet: %w", regErr)
	}
	return nil
}

// observe reads the Machine (armErr: the client or the registration
// failed already) and the node's Node. A Node whose UID differs from the
// one the last pass saw was deleted since (AKS deletes it after its drain
// for a disruptive goal) and registered again by the kubelet, which does
// so within seconds: for the table it is gone.
func (f *MachineFollower) observe(ctx context.Context, cl machineapi.Backend, armErr error, cs kubeclient.Interface, name string, rec machineapi.GoalRecord) (machineapi.Observed, *corev1.Node, error) {
	var obs machineapi.Observed
	if armErr == nil {
		obs.Machine, armErr = cl.Get(ctx)
	}
	obs.ARMError = armErr
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return obs, nil, nil
	case err != nil:
		return obs, nil, err
	}
	obs.NodeDeletionTaint = deleting(n)
	obs.NodeExists = rec.NodeUID == "" || string(n.UID) == rec.NodeUID
	return obs, n, nil
}

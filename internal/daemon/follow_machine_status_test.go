package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/test/fakearm"
)

// statusBackend is the fake ARM's client as a backend the node may
// write status to (as in-cluster mode's is), recording what it writes.
type statusBackend struct {
	machineapi.Backend
	written []machineapi.Status
}

func (b *statusBackend) PatchStatus(_ context.Context, s machineapi.Status) error {
	b.written = append(b.written, s)
	return nil
}

// Where the node may write its Machine's status (in-cluster mode), each
// pass's outcome is written there: the applied eTag and decision, a
// failure as Failed with the error; a steady pass writes nothing new.
func TestFollowMachineWritesStatusWhereItMay(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	cl, err := e.f.ARM()
	if err != nil {
		t.Fatal(err)
	}
	b := &statusBackend{Backend: cl}
	e.f.ARM = func() (machineapi.Backend, error) { return b, nil }
	// The first pass adopts the eTag, the second finds the goal applied,
	// the third is steady and writes nothing.
	for range 3 {
		e.follow(t)
	}
	etag := e.goal(t).ETag
	if len(b.written) != 2 || b.written[1].ProvisioningState != statusSucceeded || b.written[1].ObservedSettingsVersion != etag || b.written[1].Message != "applied: the goal is applied" {
		t.Fatalf("status written %+v; want the adoption and then Succeeded at eTag %s, once", b.written, etag)
	}
	e.arm.Inject(fakearm.Fault{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusServiceUnavailable, Code: "ServiceUnavailable", Message: "try later", Times: 3})
	_ = e.f.Follow(context.Background())
	// A GET that fails leaves no Machine to write to.
	if len(b.written) != 2 {
		t.Errorf("status written while the Machine could not be read: %+v", b.written)
	}
	e.arm.Update(e.id.String(), func(k map[string]any) { k["orchestratorVersion"] = "1.36.0" })
	e.follow(t)
	last := b.written[len(b.written)-1]
	if len(b.written) != 3 || last.ProvisioningState != statusReconciling || !strings.Contains(last.Message, "wait-for-node-deletion") {
		t.Errorf("status after a version change with the Node there: %+v", b.written)
	}
}

// An in-cluster config runs follow-machine without a target cluster.
func TestAgentFollowsAnInClusterMachine(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load("../../examples/acl-bootstrap-token.json")
	if err != nil {
		t.Fatal(err)
	}
	c.Agent.MachineClient = &config.MachineClient{Mode: config.MachineClientInCluster}
	a, err := New(c, l, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	follows := false
	for _, lp := range a.Loops {
		follows = follows || lp.Name == followMachineLoop
	}
	if !follows {
		t.Error("no follow-machine loop in in-cluster mode")
	}
}

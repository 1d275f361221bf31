package lifecycle

import (
	"context"
	"crypto/x509"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

const regCluster = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/flex-rg/providers/Microsoft.ContainerService/managedClusters/flex-aks"

func loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fakeMachineAPI is a fake ARM trusting a fake tenant, and the client
// factory start uses, signing in as the tenant's service principal.
func fakeMachineAPI(t *testing.T) (*fakearm.Server, MachineClientFunc, string) {
	tn := fakeentra.Start(t, loopback(t))
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID(), Secret: "s3cret-value"})
	arm := fakearm.Start(t, loopback(t), fakearm.Options{Tokens: tn, APIVersions: []string{config.DefaultMachineAPIVersion}})
	arm.SetPolling(1, "")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(arm.CAPEM)
	spec := identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app, ClientSecret: "s3cret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}
	newClient := func(c *config.Config) (machineapi.Backend, bool, error) {
		id, ok, err := machineapi.IDFromConfig(c)
		if !ok || err != nil {
			return nil, ok, err
		}
		endpoint, aud := machineapi.Endpoint(c.Azure.Cloud, arm.URL)
		cl, err := machineapi.New(machineapi.Options{ID: id, Endpoint: endpoint, Audience: aud, APIVersion: c.Azure.MachineAPIVersion,
			Tokens: &identity.Source{Spec: spec}, Identity: spec.String(), HTTPClient: transport.Policy{RootCAs: roots}.Client(),
			Poll: machineapi.Poll{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxRetryAfter: time.Second, Timeout: time.Minute}})
		if err != nil {
			return nil, true, err
		}
		return cl, true, nil
	}
	return arm, newClient, app
}

func armConfig(require bool) *config.Config {
	c := &config.Config{}
	c.Azure.TargetCluster = &config.TargetCluster{ResourceID: regCluster}
	c.Azure.TargetAgentPoolName, c.Azure.MachineAPIVersion = "aksflexnodes", config.DefaultMachineAPIVersion
	c.Agent.NodeName, c.Agent.RequireMachineRegistration = "edge-01", require
	c.Components.Kubernetes, c.Components.Containerd, c.Components.Runc = "1.35.0", "1.7.28", "1.3.0"
	c.Networking.CNIVersion = "1.6.2"
	c.Node.MaxPods = 110
	return c
}

// A config without a target cluster never reaches ARM.
func TestRegisterMachineWithoutTargetClusterTalksToNoARM(t *testing.T) {
	out := task.NewOutput[machineapi.Record]("register-machine")
	never := func(*config.Config) (machineapi.Backend, bool, error) {
		t.Fatal("the machine client was made for a config without azure.targetCluster.resourceId")
		return nil, false, nil
	}
	res, err := RegisterMachine(&config.Config{}, never, out, t.Logf, time.Now).Do(context.Background())
	if err != nil || res.Changed {
		t.Fatalf("%v %v", res, err)
	}
	if rec, _ := out.Get(); rec.ResourceID != "" {
		t.Errorf("record %+v", rec)
	}
}

// With requireMachineRegistration, a 403 refuses start at its first
// phase, naming the Machine and ARM's code, and nothing is on the host.
func TestRequiredRegistrationRefusesStartBeforeTheHostChanges(t *testing.T) {
	arm, newClient, app := fakeMachineAPI(t)
	arm.Inject(fakearm.Fault{Method: http.MethodGet, Status: http.StatusForbidden, Code: "AuthorizationFailed",
		Message: fmt.Sprintf("The client '%s' does not have authorization to perform action 'Microsoft.ContainerService/managedClusters/agentPools/machines/read'.", app)})
	root := t.TempDir()
	l, _ := layout.New(root, "/opt/aks-flex-node", "")
	s := NewStart(Options{Layout: l, Config: armConfig(true), MachineClient: newClient})
	_, err := (&task.Runner{Log: slog.New(slog.DiscardHandler)}).Phases(context.Background(), s.Phases("v2")...)
	id := regCluster + "/agentPools/aksflexnodes/machines/edge-01"
	for _, want := range []string{"register-machine", id, "AuthorizationFailed", "agent.requireMachineRegistration is true", app} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	var files []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p != root {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Errorf("the refused start left %v on the host", files)
	}
}

// Without it, the node joins with a warning, and the record says the
// Machine is not registered; a later start that registers records that.
func TestOptionalRegistrationWarnsAndRecords(t *testing.T) {
	arm, newClient, _ := fakeMachineAPI(t)
	arm.Inject(fakearm.Fault{Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "no role"})
	l, _ := layout.New(t.TempDir(), "/opt/aks-flex-node", "")
	h := Host{Layout: l, Tracker: NewTracker(l)}
	c := armConfig(false)
	var warned []string
	warn := func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }
	out := task.NewOutput[machineapi.Record]("register-machine")
	if _, err := RegisterMachine(c, newClient, out, warn, time.Now).Do(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "AuthorizationFailed") || !strings.Contains(warned[0], "not registered") {
		t.Errorf("warnings %q", warned)
	}
	if _, err := RecordMachineRegistration(h, out).Do(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := LoadMachineRegistration(l.OnRoot(l.MachineRegistration()))
	if err != nil || rec.Registered() || rec.Code != "AuthorizationFailed" || !strings.Contains(rec.Line(), "NOT registered") {
		t.Fatalf("record %+v %v", rec, err)
	}
	// ARM allows it now: created, then adopted; a converged start
	// rewrites nothing.
	for i, want := range []machineapi.Outcome{machineapi.Created, machineapi.Adopted, machineapi.Adopted} {
		out := task.NewOutput[machineapi.Record]("register-machine")
		res, err := RegisterMachine(c, newClient, out, warn, time.Now).Do(context.Background())
		if err != nil || res.Changed != (want != machineapi.Adopted) {
			t.Fatalf("run %d: %v %v", i, res, err)
		}
		rr, err := RecordMachineRegistration(h, out).Do(context.Background())
		if err != nil || rr.Changed != (i < 2) {
			t.Errorf("run %d: record %v %v", i, rr, err)
		}
		if rec, _ := LoadMachineRegistration(l.OnRoot(l.MachineRegistration())); rec.Outcome != want || !rec.Registered() || rec.ETag == "" {
			t.Errorf("run %d: record %+v", i, rec)
		}
	}
}

package daemon

import (
	"context"
	"crypto/x509"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

// followEnv is a joined host (driftHost), a fake Entra tenant and a fake
// ARM that checks its tokens, the node's Node in a fake API server, and
// the follower of the node's Machine, its repave and reset recorded.
type followEnv struct {
	h       *driftHost
	arm     *fakearm.Server
	cs      *fake.Clientset
	f       *MachineFollower
	id      machineapi.MachineID
	repaves []*config.Config
	resets  int
}

func loopback(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newFollowEnv(t testing.TB) *followEnv {
	t.Helper()
	h := newDriftHost(t)
	c, err := config.Load(h.k.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	tn := fakeentra.Start(t, loopback(t))
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID(), Secret: "s3cret-value"})
	arm := fakearm.Start(t, loopback(t), fakearm.Options{Tokens: tn, APIVersions: []string{config.DefaultMachineAPIVersion}})
	spec := identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app, ClientSecret: "s3cret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(arm.CAPEM) {
		t.Fatal("fake ARM CA")
	}
	id := machineapi.MachineID{Cluster: config.ClusterID{SubscriptionID: "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b", ResourceGroup: "flex-rg", Name: "flex-aks"},
		Pool: "aksflexnodes", Name: c.Agent.NodeName}
	endpoint, aud := machineapi.Endpoint("AzurePublicCloud", arm.URL)
	cl, err := machineapi.New(machineapi.Options{ID: id, Endpoint: endpoint, Audience: aud, APIVersion: config.DefaultMachineAPIVersion,
		Tokens: &identity.Source{Spec: spec}, Identity: spec.String(), HTTPClient: transport.Policy{RootCAs: roots, Limits: machineapi.Limits}.Client(),
		Retry: machineapi.Retry{MaxRetries: 2, MaxElapsed: time.Minute, BaseDelay: time.Second, MaxDelay: time.Second, MaxRetryAfter: time.Second},
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	e := &followEnv{h: h, arm: arm, id: id,
		cs: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Agent.NodeName, UID: "node-uid-1",
			Labels: map[string]string{"kubernetes.io/hostname": c.Agent.NodeName}}})}
	h.k.Metrics = metrics.NewRegistry(h.l)
	e.f = &MachineFollower{Keeper: h.k, Config: c,
		ARM:    func() (machineapi.Backend, error) { return cl, nil },
		Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(e.cs), nil },
		Repave: func(_ context.Context, c *config.Config) error { e.repaves = append(e.repaves, c); return nil },
		Reset:  func(context.Context) error { e.resets++; return nil },
	}
	return e
}

// machine stores the node's Machine in the fake as registered earlier
// at the config's version.
func (e *followEnv) machine() {
	e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.35.0"})
}

func (e *followEnv) follow(t *testing.T) {
	t.Helper()
	if err := e.f.Follow(context.Background()); err != nil {
		t.Fatalf("follow: %v\n%s", err, e.h.log.String())
	}
}

func (e *followEnv) goal(t *testing.T) machineapi.GoalRecord {
	t.Helper()
	rec, err := machineapi.LoadGoalRecord(e.h.l.OnRoot(e.h.l.MachineGoal()))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (e *followEnv) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(context.Background(), e.f.Config.Agent.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *followEnv) condition(t *testing.T) corev1.NodeCondition {
	t.Helper()
	for _, c := range e.node(t).Status.Conditions {
		if c.Type == ConditionMachine {
			return c
		}
	}
	t.Fatalf("no %s condition on the Node", ConditionMachine)
	return corev1.NodeCondition{}
}

// machineFiles is every node file in the active machine, concatenated.
func (e *followEnv) machineFiles(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	err := filepath.WalkDir(e.h.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		data, err := os.ReadFile(p)
		all.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String()
}

// An admin changes the Machine's labels and taints (a new eTag): the
// Node gets the labels the node may set, the kubelet's registration
// settings in the machine get labels and taints, the eTag is adopted,
// nothing is repaved, and drift repair keeps the new files.
func TestFollowMachineAppliesLabelsInPlace(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	e.follow(t)
	if g := e.goal(t); g.Decision != machineapi.ActionNone || g.Applied.Version != "1.35.0" {
		t.Fatalf("first pass: %+v", g)
	}
	etag, _ := e.arm.Update(e.id.String(), func(k map[string]any) {
		k["nodeLabels"] = map[string]any{"team": "blue", "node-restriction.kubernetes.io/pool": "x"}
		k["nodeTaints"] = []any{"dedicated=gpu:NoSchedule"}
	})
	e.follow(t)
	g := e.goal(t)
	if g.Decision != machineapi.ActionApplyInPlace || g.ETag != etag || g.Applied.Labels["team"] != "blue" {
		t.Fatalf("after the update: %+v", g)
	}
	labels := e.node(t).Labels
	if labels["team"] != "blue" || labels["kubernetes.io/hostname"] == "" {
		t.Errorf("Node labels: %v", labels)
	}
	if _, set := labels["node-restriction.kubernetes.io/pool"]; set {
		t.Errorf("the node set a label NodeRestriction refuses: %v", labels)
	}
	files := e.machineFiles(t)
	if !strings.Contains(files, "team=blue") || !strings.Contains(files, "dedicated") || strings.Contains(files, "node-restriction.kubernetes.io") {
		t.Errorf("the kubelet's registration settings lack the goal's labels and taints (or carry a refused label)")
	}
	if len(e.repaves) != 0 {
		t.Errorf("repaved for labels: %d", len(e.repaves))
	}
	if c := e.condition(t); c.Status != corev1.ConditionTrue || c.Reason != "ApplyInPlace" || !strings.Contains(c.Message, etag) {
		t.Errorf("condition: %+v", c)
	}
	if n := decisions(t, e, "apply-in-place"); n != 1 {
		t.Errorf("machine_goal_decisions_total{decision=apply-in-place} = %v", n)
	}
	e.h.keep(t)
	if r := e.h.repairs(t); len(r) != 0 {
		t.Errorf("drift repair undid the goal: %q", r)
	}
	e.follow(t)
	if g := e.goal(t); g.Decision != machineapi.ActionNone || g.ETag != etag {
		t.Errorf("the pass after: %+v", g)
	}
}

// A version change while the Node is there: the node waits for AKS,
// says so, and changes nothing.
func TestFollowMachineWaitsWhileNodeExists(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	e.follow(t)
	old := e.goal(t).ETag
	e.arm.Update(e.id.String(), func(k map[string]any) { k["orchestratorVersion"] = "1.35.1" })
	e.follow(t)
	g := e.goal(t)
	if g.Decision != machineapi.ActionWaitForNodeDeletion || g.ETag != old || g.Applied.Version != "1.35.0" || g.NodeUID != "node-uid-1" {
		t.Fatalf("%+v", g)
	}
	if len(e.repaves) != 0 {
		t.Errorf("repaved with the Node there")
	}
	if c := e.condition(t); c.Status != corev1.ConditionFalse || c.Reason != "WaitForNodeDeletion" {
		t.Errorf("condition: %+v", c)
	}
	if !strings.Contains(e.h.log.String(), "decision=wait-for-node-deletion") {
		t.Errorf("no decision line:\n%s", e.h.log.String())
	}
}

// The version (and maxPods) change and AKS deletes the Node: the node
// repaves to the goal, the goal's settings in the repave's config, and
// adopts the eTag. A Node the kubelet registered again after AKS deleted
// it (another UID than the last pass saw) counts as gone, also when the
// change, the deletion and the registration all fell between two passes.
func TestFollowMachineRepavesWhenNodeGone(t *testing.T) {
	for _, how := range []string{"deleted", "registered-again-while-waiting", "registered-again-between-passes"} {
		t.Run(how, func(t *testing.T) {
			e := newFollowEnv(t)
			e.machine()
			e.follow(t)
			etag, _ := e.arm.Update(e.id.String(), func(k map[string]any) { k["orchestratorVersion"] = "1.35.1"; k["maxPods"] = 50 })
			if how != "registered-again-between-passes" {
				e.follow(t) // waits
				if g := e.goal(t); g.Decision != machineapi.ActionWaitForNodeDeletion {
					t.Fatalf("with the Node there: %+v", g)
				}
			}
			name := e.f.Config.Agent.NodeName
			if err := e.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if how != "deleted" {
				if _, err := e.cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-uid-2")}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			e.follow(t)
			if len(e.repaves) != 1 || e.repaves[0].Components.Kubernetes != "1.35.1" || e.repaves[0].Node.MaxPods != 50 {
				t.Fatalf("repaves: %d %+v", len(e.repaves), e.repaves)
			}
			g := e.goal(t)
			if g.Decision != machineapi.ActionRepave || g.ETag != etag || g.Applied.Version != "1.35.1" || g.Applied.MaxPods != 50 {
				t.Errorf("%+v", g)
			}
			e.follow(t)
			if g := e.goal(t); g.Decision != machineapi.ActionNone || len(e.repaves) != 1 {
				t.Errorf("the pass after the repave: %+v, %d repaves", g, len(e.repaves))
			}
		})
	}
}

// The Machine is deleted: nothing happens until the Node carries the
// deletion taint; then the drain-and-reset path runs, once.
func TestFollowMachineResetsWhenMachineDeletedAndTainted(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	e.follow(t)
	if !e.arm.Remove(e.id.String()) {
		t.Fatal("no Machine to remove")
	}
	e.follow(t)
	if g := e.goal(t); g.Decision != machineapi.ActionWaitForDeletionTaint || e.resets != 0 {
		t.Fatalf("without the taint: %+v, %d resets", g, e.resets)
	}
	n := e.node(t)
	n.Spec.Taints = []corev1.Taint{{Key: DeletingTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := e.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.follow(t)
	e.follow(t)
	if e.resets != 1 {
		t.Errorf("resets: %d", e.resets)
	}
	if g := e.goal(t); g.Decision != machineapi.ActionReset {
		t.Errorf("%+v", g)
	}
}

// ARM fails (503, then 403): the node changes nothing, reports the
// error on the Node and in the record, and follows again once ARM
// answers.
func TestFollowMachineChangesNothingWhenARMFails(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	e.follow(t)
	before := e.machineFiles(t)
	e.arm.Update(e.id.String(), func(k map[string]any) { k["nodeLabels"] = map[string]any{"team": "red"} })
	for _, f := range []fakearm.Fault{
		{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusServiceUnavailable, Code: "ServiceUnavailable", Message: "try later", Times: 3},
		{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "no access", Times: 1},
	} {
		e.arm.Inject(f)
		err := e.f.Follow(context.Background())
		if err == nil || !strings.Contains(err.Error(), f.Code) {
			t.Fatalf("%s: the pass says %v", f.Code, err)
		}
		g := e.goal(t)
		if g.Decision != machineapi.ActionHold || !strings.Contains(g.Error, f.Code) || g.Applied.Labels["team"] != "" {
			t.Errorf("%s: %+v", f.Code, g)
		}
		if _, set := e.node(t).Labels["team"]; set || e.machineFiles(t) != before {
			t.Errorf("%s: the node changed while ARM failed", f.Code)
		}
		if c := e.condition(t); c.Status != corev1.ConditionFalse || c.Reason != "Hold" || !strings.Contains(c.Message, f.Code) {
			t.Errorf("%s: condition %+v", f.Code, c)
		}
	}
	e.follow(t)
	if e.node(t).Labels["team"] != "red" {
		t.Errorf("not followed once ARM answered: %+v", e.goal(t))
	}
}

// A registration that failed at start (requireMachineRegistration
// false) is retried each pass until it succeeds, and the record status
// reads says so.
func TestAgentRetriesOptionalRegistration(t *testing.T) {
	e := newFollowEnv(t)
	l := e.h.l
	writeFile(t, l.OnRoot(l.MachineRegistration()), []byte(`{"resourceId":"`+e.id.String()+`","error":"PUT: 403 AuthorizationFailed","code":"AuthorizationFailed","at":"2026-12-01T00:00:00Z"}`))
	e.arm.Inject(fakearm.Fault{Method: http.MethodPut, Kind: fakearm.KindMachine, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "no access yet", Times: 1})
	err := e.f.Follow(context.Background())
	if err == nil || !strings.Contains(err.Error(), "AuthorizationFailed") {
		t.Fatalf("first pass: %v", err)
	}
	rec, err := lifecycle.LoadMachineRegistration(l.OnRoot(l.MachineRegistration()))
	if err != nil || rec.Registered() || rec.Code != "AuthorizationFailed" {
		t.Fatalf("after a failed retry: %+v %v", rec, err)
	}
	if g := e.goal(t); g.Decision != machineapi.ActionHold {
		t.Errorf("decided %s while not registered", g.Decision)
	}
	e.follow(t)
	rec, err = lifecycle.LoadMachineRegistration(l.OnRoot(l.MachineRegistration()))
	if err != nil || !rec.Registered() || rec.Outcome != machineapi.Created || rec.ETag == "" {
		t.Fatalf("after the retry that succeeds: %+v %v", rec, err)
	}
	if !strings.Contains(rec.Line(), "created") || e.arm.Machine(e.id.String()) == nil {
		t.Errorf("record line %q; Machine %v", rec.Line(), e.arm.Machine(e.id.String()))
	}
	if g := e.goal(t); g.Decision != machineapi.ActionNone || g.ETag != rec.ETag {
		t.Errorf("after registration: %+v", g)
	}
}

// decisions is machine_goal_decisions_total for decision.
func decisions(t *testing.T, e *followEnv, decision string) float64 {
	t.Helper()
	mfs, err := e.h.k.Metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.Namespace+"_machine_goal_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "decision" && lp.GetValue() == decision {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// With an AKS Machine, a Node tainted for deletion whose Machine is
// still there is not reset: keep-node-object leaves the taint to
// follow-machine, which waits for the Machine to go.
func TestFollowMachineDoesNotResetWhileTheMachineExists(t *testing.T) {
	e := newFollowEnv(t)
	e.machine()
	n := e.node(t)
	n.Spec.Taints = []corev1.Taint{{Key: DeletingTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := e.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := &NodeObjectKeeper{Keeper: e.h.k, Client: e.f.Client, Reset: e.f.Reset, DeletionFollowsMachine: true}
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.follow(t)
	if e.resets != 0 {
		t.Errorf("reset with the Machine there: %d", e.resets)
	}
	if g := e.goal(t); g.Decision != machineapi.ActionNone {
		t.Errorf("%+v", g)
	}
}

// The agent runs follow-machine only when the config names a target
// cluster, and then leaves the deletion taint to it.
func TestAgentFollowsTheMachineOnlyWithATargetCluster(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, example := range []string{"acl-bootstrap-token.json", "acl-aks-machine.json"} {
		c, err := config.Load("../../examples/" + example)
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(c, l, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		follows := false
		for _, lp := range a.Loops {
			follows = follows || lp.Name == followMachineLoop
		}
		if want := example == "acl-aks-machine.json"; follows != want {
			t.Errorf("%s: follow-machine %v, want %v", example, follows, want)
		}
	}
}

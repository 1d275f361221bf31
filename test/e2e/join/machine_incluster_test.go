package join

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
)

// The in-cluster endpoint as upstream's default names it: its
// controller's Service, through the API server's service proxy.
const (
	inClusterNS      = "aks-flex-system"
	inClusterService = "aks-flex-controller"
)

// TestMachineInCluster: in-cluster mode (agent.machineClient.mode
// in-cluster) against a real kube-apiserver. The endpoint is upstream's
// default, the aks-flex-controller Service in aks-flex-system reached
// through the API server's service proxy; behind it, a stand-in for
// AKS's in-cluster controller (which does not exist outside AKS) that
// keeps the Machine JSON it is given. start's registration task, with
// the product's client factory and the bootstrap token's credential
// (the one RBAC lets proxy to that Service), creates the Machine there;
// a second start adopts it; the node's status PATCH reaches the
// controller; an endpoint the credential may not proxy to is an error
// naming it, not "no Machine".
func TestMachineInCluster(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binDir, err := controlplane.FindBinDir("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	lab := netlab.New(t)
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: lab.Outer, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr)
		}
		_ = cp.Stop()
	})
	// The controller listens where the API server reaches it: this
	// machine's end of the test's veth (never loopback: the service
	// proxy refuses loopback endpoints).
	l, err := net.Listen("tcp", net.JoinHostPort(lab.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctl := &machineController{machines: map[string]map[string]any{}}
	srv := &http.Server{Handler: ctl, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	exposeController(ctx, t, cp, lab.Outer, int32(l.Addr().(*net.TCPAddr).Port))

	c := inClusterConfig(t, cp)
	step("start registers the Machine through the API server's service proxy, with the bootstrap token's credential")
	rec := registerAtStart(ctx, t, c)
	want := "/api/v1/namespaces/aks-flex-system/services/http:aks-flex-controller:80/proxy/machines/edge-01"
	if rec.Outcome != machineapi.Created || rec.ResourceID != want || rec.ETag == "" {
		t.Fatalf("the registration record %+v; want created at %s", rec, want)
	}
	m := ctl.machine("edge-01")
	k, _ := m["properties"].(map[string]any)["kubernetes"].(map[string]any)
	if k["orchestratorVersion"] != "1.35.4" || fmt.Sprint(k["maxPods"]) != "110" {
		t.Errorf("the Machine the controller keeps: %v", m)
	}
	if again := registerAtStart(ctx, t, c); again.Outcome != machineapi.Adopted || again.ETag != rec.ETag {
		t.Errorf("a second start: %+v; want the Machine adopted at eTag %s", again, rec.ETag)
	}

	step("the node's status reaches the controller")
	ic, err := machineapi.InClusterAtStart(c)
	if err != nil {
		t.Fatal(err)
	}
	st := machineapi.Status{ProvisioningState: "Succeeded", ObservedSettingsVersion: rec.ETag, Message: "applied: the goal is applied"}
	if err := ic.PatchStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	if got := ctl.status("edge-01"); got != st {
		t.Errorf("the controller's status %+v, want %+v", got, st)
	}

	step("an endpoint the credential may not reach is an error naming it")
	c.Agent.MachineClient.EndpointURL = "/api/v1/namespaces/aks-flex-system/services/http:no-such-controller:80/proxy"
	bad, err := machineapi.InClusterAtStart(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bad.Get(ctx)
	// RBAC lets the credential proxy to the controller's Service only:
	// the API server answers 403 for any other, which is an error, not
	// "no Machine".
	if err == nil || got != nil || !strings.Contains(err.Error(), "no-such-controller") || !strings.Contains(err.Error(), "403") {
		t.Errorf("GET through a missing Service: %v, %v; want an error naming it", got, err)
	}
	t.Logf("requests the controller saw: %v", ctl.seen())
}

// inClusterConfig is a config in in-cluster mode with the bootstrap
// token, defaulted and validated as start loads it.
func inClusterConfig(t *testing.T, cp *controlplane.ControlPlane) *config.Config {
	doc := map[string]any{
		"azure": map[string]any{"bootstrapToken": map[string]any{"token": cp.Token}},
		"agent": map[string]any{"nodeName": "edge-01", "requireMachineRegistration": true,
			"machineClient": map[string]any{"mode": "in-cluster"}},
		"components": map[string]any{"kubernetes": "1.35.4"},
		"node": map[string]any{"maxPods": 110, "kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(cp.Server, "https://"),
			"caCertData": base64.StdEncoding.EncodeToString(cp.CAPEM)}},
	}
	data, _ := json.Marshal(doc)
	c, err := config.Parse("in-cluster config", data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// registerAtStart runs start's registration task with the product's
// client factory and returns its record.
func registerAtStart(ctx context.Context, t *testing.T, c *config.Config) machineapi.Record {
	t.Helper()
	out := &task.Output[machineapi.Record]{}
	if _, err := lifecycle.RegisterMachine(c, lifecycle.DefaultMachineClient("/"), out, t.Logf, time.Now).Do(ctx); err != nil {
		t.Fatalf("register-machine: %v", err)
	}
	rec, err := out.Get()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// exposeController makes the controller the aks-flex-controller Service
// (no selector: its endpoint is the controller's address) and lets the
// bootstrap tokens' group (start) and the nodes (the agent) proxy to it,
// and to nothing else.
//
//nolint:staticcheck // see the Endpoints below
func exposeController(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, addr string, port int32) {
	cs := cp.Client
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inClusterNS}}, metav1.CreateOptions{}))
	must(cs.CoreV1().Services(inClusterNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: inClusterService},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}}}}, metav1.CreateOptions{}))
	// The API server proxies only to an endpoint that is a Pod of the
	// Service's namespace with that IP (its SSRF guard): the controller's
	// Pod object, never scheduled, carries the controller's address.
	pod := controllerPod(ctx, t, cp, addr)
	//nolint:staticcheck // the API server's service proxy reads Endpoints
	must(cs.CoreV1().Endpoints(inClusterNS).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: inClusterService},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: addr, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: inClusterNS, Name: pod.Name, UID: pod.UID}}},
			Ports: []corev1.EndpointPort{{Name: "http", Port: port}}}}}, metav1.CreateOptions{}))
	must(cs.RbacV1().Roles(inClusterNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "aks-flex-machines"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services/proxy"}, ResourceNames: []string{"http:" + inClusterService + ":80", inClusterService},
			Verbs: []string{"get", "create", "update", "patch"}}}}, metav1.CreateOptions{}))
	must(cs.RbacV1().RoleBindings(inClusterNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "aks-flex-machines"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "aks-flex-machines"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: controlplane.BootstrapGroup},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}}}, metav1.CreateOptions{}))
}

// machineController stands in for AKS's in-cluster controller behind
// the endpoint: it keeps each Machine's JSON as PUT (with an eTag and
// provisioningState Succeeded, as ARM answers), answers GETs with it
// (404 in ARM's error envelope when there is none), and keeps the
// status the node PATCHes.
type machineController struct {
	mu       sync.Mutex
	machines map[string]map[string]any
	statuses map[string]machineapi.Status
	requests []string
}

func (c *machineController) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, r.Method+" "+r.URL.Path)
	rest, ok := strings.CutPrefix(r.URL.Path, "/machines/")
	name, status := strings.CutSuffix(rest, "/status")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case !ok || name == "" || strings.Contains(name, "/"):
		reply(http.StatusNotFound, map[string]any{"error": map[string]any{"code": "NotFound", "message": "no such path"}})
	case status && r.Method == http.MethodPatch:
		var p struct {
			Properties struct{ Status machineapi.Status } `json:"properties"`
		}
		if json.Unmarshal(body, &p) != nil || c.machines[name] == nil {
			reply(http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "InvalidRequestContent", "message": "want {properties:{status}} of a Machine"}})
			return
		}
		if c.statuses == nil {
			c.statuses = map[string]machineapi.Status{}
		}
		c.statuses[name] = p.Properties.Status
		reply(http.StatusOK, c.machines[name])
	case r.Method == http.MethodGet && c.machines[name] != nil:
		reply(http.StatusOK, c.machines[name])
	case r.Method == http.MethodGet:
		reply(http.StatusNotFound, map[string]any{"error": map[string]any{"code": "NotFound", "message": "Machine " + name + " not found."}})
	case r.Method == http.MethodPut:
		var m map[string]any
		if json.Unmarshal(body, &m) != nil {
			reply(http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "InvalidRequestContent", "message": "not JSON"}})
			return
		}
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		props["eTag"], props["provisioningState"] = fmt.Sprintf("etag-%d", len(c.requests)), "Succeeded"
		c.machines[name] = map[string]any{"name": name, "properties": props}
		reply(http.StatusCreated, c.machines[name])
	default:
		reply(http.StatusMethodNotAllowed, map[string]any{"error": map[string]any{"code": "MethodNotAllowed", "message": r.Method}})
	}
}

func (c *machineController) machine(name string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.machines[name]
}

func (c *machineController) status(name string) machineapi.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statuses[name]
}

func (c *machineController) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.requests...)
}

// controllerPod is the controller's Pod object with addr as its IP. The
// namespace's default ServiceAccount, which admission wants, comes from
// the controller manager within seconds of the namespace.
func controllerPod(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, addr string) *corev1.Pod {
	t.Helper()
	no := false
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: inClusterService + "-0", Namespace: inClusterNS},
		// Never scheduled (a node joins in the agent's test): a kubelet
		// running it would replace its IP with its sandbox's.
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "aks-flex-node.test/never"}}, AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "controller", Image: "aks-flex-controller.invalid/controller:test"}}}}
	deadline := time.Now().Add(time.Minute)
	for {
		made, err := cp.Client.CoreV1().Pods(inClusterNS).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			made.Status.PodIP, made.Status.PodIPs = addr, []corev1.PodIP{{IP: addr}}
			made, err = cp.Client.CoreV1().Pods(inClusterNS).UpdateStatus(ctx, made, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return made
		}
		if time.Now().After(deadline) {
			t.Fatalf("create the controller's Pod: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

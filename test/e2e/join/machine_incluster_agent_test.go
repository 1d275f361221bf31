package join

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

// An ACL-like host in in-cluster mode (upstream's contract: the Machine
// JSON through the cluster connection, the default endpoint through the
// real API server's service proxy, AKS's in-cluster controller stood in
// for): start registers the Machine with the bootstrap token's
// credential, registration required; the agent, as the node
// (system:node:<name>, which RBAC lets proxy to that Service), writes the
// applied eTag on the Machine's status within one interval and follows
// a label change there onto the Node.
func TestFollowMachineInCluster(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := &env{ctx: ctx}
	e.startCluster(t)
	l, err := net.Listen("tcp", net.JoinHostPort(e.net.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctl := &machineController{machines: map[string]map[string]any{}}
	srv := &http.Server{Handler: ctl, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	exposeController(ctx, t, e.cp, e.net.Outer, int32(l.Addr().(*net.TCPAddr).Port))

	sc := scenario{name: "acl-incluster", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node", nodeName: "acl-incluster-1"}
	version := e.manifest.Components.Kubernetes
	h := e.bootMachineHost(t, sc, nil, map[string]string{version: buildBundle(t, e.dist+"/aks-flex-node", e.bundle, e.layoutDir, e.manifest)})
	var cfg map[string]any
	if err := json.Unmarshal(e.bootstrapTokenConfig(t, sc), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["bootstrap"].(map[string]any)["offlineArtifacts"] = map[string]any{"source": machineBundleDir + "{{ .KubernetesVersion }}"}
	ag := cfg["agent"].(map[string]any)
	ag["machineClient"] = map[string]any{"mode": "in-cluster"}
	ag["requireMachineRegistration"] = true
	ag["machineReconcileInterval"] = machineInterval.String()
	writeConfig(t, h, cfg)

	step("In-cluster mode: start registers the Machine through the API server's service proxy")
	e.install(t, h)
	e.start(t, h, sc, "first")
	kubetest.WaitReadySince(ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)
	m := ctl.machine(sc.nodeName)
	props, _ := m["properties"].(map[string]any)
	k, _ := props["kubernetes"].(map[string]any)
	if m == nil || k["orchestratorVersion"] != version {
		t.Fatalf("the controller's Machine after start: %v", m)
	}
	etag, _ := props["eTag"].(string)
	e.benchConvergedStart(t, h, sc)

	step("The agent, as the node, writes the applied eTag on the Machine's status")
	joined := time.Now()
	for st := ctl.status(sc.nodeName); st.ObservedSettingsVersion != etag || st.ProvisioningState != "Succeeded"; st = ctl.status(sc.nodeName) {
		if time.Since(joined) > machineInterval+machineInterval/10+time.Minute {
			t.Fatalf("no Succeeded status at eTag %s on the Machine %v after the join: %+v; controller saw %v", etag, time.Since(joined).Round(time.Second), st, ctl.seen())
		}
		time.Sleep(time.Second)
	}
	t.Logf("BENCH follow-machine in-cluster status-written-after-join=%v", time.Since(joined).Round(time.Millisecond))

	step("A label change on the Machine reaches the Node")
	changed := time.Now()
	newTag := ctl.setLabels(sc.nodeName, map[string]any{"team": "green"})
	for {
		n, err := e.cp.Client.CoreV1().Nodes().Get(ctx, sc.nodeName, metav1.GetOptions{})
		if err == nil && n.Labels["team"] == "green" {
			break
		}
		if time.Since(changed) > machineInterval+machineInterval/10+30*time.Second {
			t.Fatalf("Node %s has no label team=green %v after the Machine's change (err %v)", sc.nodeName, time.Since(changed).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("BENCH follow-machine in-cluster label-applied-after=%v", time.Since(changed).Round(time.Millisecond))
	deadline := time.Now().Add(machineInterval + machineInterval/10 + 30*time.Second)
	for st := ctl.status(sc.nodeName); st.ObservedSettingsVersion != newTag; st = ctl.status(sc.nodeName) {
		if time.Now().After(deadline) {
			t.Fatalf("the Machine's status does not name eTag %s: %+v", newTag, st)
		}
		time.Sleep(time.Second)
	}
	if out := h.RunOK(t, sc.agent, "status"); !strings.Contains(out, "/proxy/machines/"+sc.nodeName) {
		t.Errorf("status does not name the in-cluster Machine:\n%s", out)
	}
	var byNode int
	for _, r := range ctl.seen() {
		if strings.HasPrefix(r, "PATCH ") {
			byNode++
		}
	}
	t.Logf("requests the controller saw: %d, of them %d status PATCHes", len(ctl.seen()), byNode)
	h.RunOK(t, sc.agent, "reset")
}

// setLabels sets the Machine's node labels as an admin's change does,
// with a new eTag, and returns it.
func (c *machineController) setLabels(name string, labels map[string]any) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	props := c.machines[name]["properties"].(map[string]any)
	props["kubernetes"].(map[string]any)["nodeLabels"] = labels
	tag := "etag-admin-" + time.Now().Format("150405.000")
	props["eTag"] = tag
	return tag
}

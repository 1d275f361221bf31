package diag

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func results(r Report) map[string]preflight.CheckResult {
	m := map[string]preflight.CheckResult{}
	for _, c := range r.Checks {
		m[c.Name] = c
	}
	return m
}

func text(t *testing.T, r Report) string {
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A healthy joined node: every check OK, in the documented order.
func TestHealthyNode(t *testing.T) {
	f := newFakeNode(t)
	r := Run(context.Background(), f.env)
	out := text(t, r)
	if r.Failed() || r.Summary.OK != len(Names) {
		t.Fatalf("healthy node:\n%s", out)
	}
	for i, c := range r.Checks {
		if c.Name != Names[i] {
			t.Errorf("check %d is %s, want %s", i, c.Name, Names[i])
		}
	}
	for _, want := range []string{
		"[debug] Checking node node-1 in machine kube1, as the node, against https://127.0.0.1:",
		"[OK api-server]: https://127.0.0.1:", "authenticated the node as system:node:node-1 (groups system:nodes)",
		"[OK client-certificate]: system:node:node-1, expires in ",
		"[OK clock-skew]: within ",
		"[OK kubelet]: kubelet.service in machine kube1 is active (running)",
		"[OK node-conditions]: Node node-1: Ready=True, no pressure, taints none, pod CIDR 10.244.0.0/24",
		"[OK cni]: /etc/cni/net.d/99-aks-flex-node.conflist (network aks-flex-node: bridge,portmap), pod CIDR 10.244.0.0/24 via cni0",
		"[OK agent]: aks-flex-node-agent.service active (running)",
		"[OK aks-machine]: no AKS Machine (azure.targetCluster.resourceId is not set)",
		"[debug] 13 ok, 0 warnings, 0 errors in ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	var back Report
	b, _ := json.Marshal(r)
	if err := json.Unmarshal(b, &back); err != nil || back.Node != testNode || len(back.Checks) != len(Names) || back.Status != "ok" {
		t.Errorf("JSON: %s", b)
	}
}

// The kubelet stopped in the machine: its check is an error saying how to
// start it and where its log is.
func TestKubeletStopped(t *testing.T) {
	f := newFakeNode(t)
	f.set(func() { f.units[node.KubeletUnitName] = "inactive" })
	r := Run(context.Background(), f.env)
	c := results(r)[NameKubelet]
	if !r.Failed() || c.Severity != preflight.SeverityError || !strings.Contains(c.Message, "kubelet.service in machine kube1 is inactive (dead)") ||
		!strings.Contains(c.Remedy, "systemctl start kubelet.service") || !strings.Contains(c.Remedy, "journalctl -D /var/lib/machines/kube1/var/log/journal -u kubelet.service") {
		t.Fatalf("kubelet stopped:\n%s", text(t, r))
	}
}

// The API server's clock 10 minutes ahead (equivalently, this host's 10
// minutes behind): clock-skew is an error naming the amount.
func TestClockSkew(t *testing.T) {
	f := newFakeNode(t)
	f.set(func() { f.skew = 10 * time.Minute })
	r := Run(context.Background(), f.env)
	c := results(r)[NameClockSkew]
	if c.Severity != preflight.SeverityError || !strings.Contains(c.Message, "this host's clock is 10m0s behind the API server's") || !strings.Contains(c.Remedy, "time synchronisation") {
		t.Fatalf("skew:\n%s", text(t, r))
	}
	f.set(func() { f.skew = -5 * time.Second })
	f.env = &Env{Layout: f.env.Layout, Config: f.env.Config, Exec: f.exec, ProcDir: f.env.ProcDir}
	if c := results(Run(context.Background(), f.env))[NameClockSkew]; c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "ahead of") {
		t.Fatalf("5 s skew: %+v", c)
	}
}

// An expired client certificate: the server refuses it (401) and the
// certificate check says when it expired and what to do.
func TestExpiredClientCertificate(t *testing.T) {
	f := newFakeNode(t)
	f.writeCert(time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	r := Run(context.Background(), f.env)
	res := results(r)
	cert, api := res[NameClientCert], res[NameAPIServer]
	if cert.Severity != preflight.SeverityError || !strings.Contains(cert.Message, "expired 1h0m0s ago") || !strings.Contains(cert.Remedy, "restart the kubelet") {
		t.Errorf("certificate: %+v", cert)
	}
	if api.Severity != preflight.SeverityError || !strings.Contains(api.Message, "rejected the node's credential (401 Unauthorized)") || !strings.Contains(api.Remedy, "client-certificate") {
		t.Errorf("api-server: %+v", api)
	}
	if t.Failed() {
		t.Log(text(t, r))
	}
}

// A certificate past 90% of its life has not been rotated: a warning.
func TestRotationOverdue(t *testing.T) {
	f := newFakeNode(t)
	f.writeCert(time.Now().Add(-95*time.Hour), time.Now().Add(5*time.Hour))
	if c := results(Run(context.Background(), f.env))[NameClientCert]; c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "rotation is overdue") {
		t.Fatalf("overdue: %+v", c)
	}
}

// NotReady, a missing pod route, an unhealthy agent.
func TestNodeNotReadyNoRouteAgentUnhealthy(t *testing.T) {
	f := newFakeNode(t)
	f.set(func() { f.ready = "Unknown" })
	f.writeRoutes(false)
	os.Remove(filepath.Join(f.root, "var/lib/aks-flex-node/agent.sock"))
	r := Run(context.Background(), f.env)
	res := results(r)
	if c := res[NameNodeConditions]; c.Severity != preflight.SeverityError || !strings.Contains(c.Message, "Ready=Unknown") {
		t.Errorf("node-conditions: %+v", c)
	}
	if c := res[NameCNI]; c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "no route for the Node's pod CIDR 10.244.0.0/24") {
		t.Errorf("cni: %+v", c)
	}
	if c := res[NameAgent]; c.Severity != preflight.SeverityWarning || !strings.Contains(c.Message, "does not answer") {
		t.Errorf("agent: %+v", c)
	}
}

// A host that never joined: one error, the rest skipped, exit 1.
func TestNotJoined(t *testing.T) {
	f := newFakeNode(t)
	os.Remove(filepath.Join(f.root, "var/lib/aks-flex-node/joined"))
	r := Run(context.Background(), f.env)
	out := text(t, r)
	if !r.Failed() || len(r.Checks) != 1 || !strings.Contains(out, "[ERROR joined]: this host has not joined a cluster") || !strings.Contains(out, "Skipped: the other checks need a joined node") {
		t.Fatalf("not joined:\n%s", out)
	}
}

// The machine's files are read inside the machine: a client certificate
// that links out of the machine to a host file is not followed there.
func TestClientCertLinkOutOfMachineNotFollowed(t *testing.T) {
	f := newFakeNode(t)
	host := filepath.Join(f.root, "host-secret.pem")
	link := filepath.Join(f.mroot, node.KubeletClientCert)
	target, err := os.Readlink(link) // absolute inside the machine
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(f.mroot, target))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, host, string(data))
	os.Remove(link)
	rel, _ := filepath.Rel(filepath.Dir(link), host)
	os.Symlink(rel, link)
	if c := results(Run(context.Background(), f.env))[NameAPIServer]; c.Severity != preflight.SeverityError || !strings.Contains(c.Message, "the node's credential") {
		t.Fatalf("a link out of the machine was followed: %+v", c)
	}
}

// Below the kubelet's eviction threshold (as its config sets it) the
// disk check is an error naming the signal.
func TestDiskPressure(t *testing.T) {
	f := newFakeNode(t)
	f.writeKubeletConfig("99.9%", "1Mi")
	c := results(Run(context.Background(), f.env))[NameDiskPressure]
	if c.Severity != preflight.SeverityError || !strings.Contains(c.Message, "below the kubelet's eviction threshold nodefs.available<99.9%") {
		t.Fatalf("disk: %+v", c)
	}
}

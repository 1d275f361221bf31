package machineapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/test/fakearm"
)

func TestRegisterCreatesAMissingMachineFromTheConfig(t *testing.T) {
	e := newEnv(t)
	w := Want{Version: "1.35.0", MaxPods: 50, Labels: map[string]string{"site": "edge"}, Taints: []string{"a=b:NoSchedule"}, ImageGCHighThreshold: 85, ImageGCLowThreshold: 80}
	r, err := Register(context.Background(), e.c, w)
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != Created || r.ETag == "" || r.Attempts != 1 {
		t.Errorf("%+v", r)
	}
	m := e.arm.Machine(e.id.String())
	k := m["properties"].(map[string]any)["kubernetes"].(map[string]any)
	if k["orchestratorVersion"] != "1.35.0" || k["maxPods"] != float64(50) || k["nodeLabels"].(map[string]any)["site"] != "edge" ||
		k["nodeTaints"].([]any)[0] != "a=b:NoSchedule" || k["kubeletConfig"].(map[string]any)["imageGcHighThreshold"] != float64(85) {
		t.Errorf("stored kubernetes profile %v", k)
	}
	if tags := m["properties"].(map[string]any)["tags"].(map[string]any); tags[FlexNodeTag] != "true" {
		t.Errorf("tags %v", tags)
	}
}

func TestRegisterAdoptsTheETagOfAMachineOfTheSameVersion(t *testing.T) {
	e := newEnv(t)
	etag := e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.35", "currentOrchestratorVersion": "1.35.0"})
	r, err := Register(context.Background(), e.c, Want{Version: "1.35.0"})
	if err != nil || r.Outcome != Adopted || r.ETag != etag {
		t.Fatalf("%+v %v", r, err)
	}
	if n := countKind(e.arm.Requests(), http.MethodPut, fakearm.KindMachine); n != 0 {
		t.Errorf("adopting wrote the Machine %d times", n)
	}
}

func TestRegisterUpdatesAMachineOfAnotherVersionWithIfMatch(t *testing.T) {
	e := newEnv(t)
	etag := e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.34.2"})
	r, err := Register(context.Background(), e.c, Want{Version: "1.35.0"})
	if err != nil || r.Outcome != Updated || r.Machine.Version() != "1.35.0" || r.ETag == etag {
		t.Fatalf("%+v %v", r, err)
	}
	for _, q := range e.arm.Requests() {
		if q.Method == http.MethodPut && q.IfMatch != etag {
			t.Errorf("PUT If-Match %q, want %q", q.IfMatch, etag)
		}
	}
}

func TestRegisterReReadsAndDecidesAgainWhenTheETagMovesBetweenGetAndPut(t *testing.T) {
	e := newEnv(t)
	e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.34.2"})
	e.arm.MoveETagAfterNextGet()
	r, err := Register(context.Background(), e.c, Want{Version: "1.35.0"})
	if err != nil || r.Outcome != Updated || r.Attempts != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	reqs := e.arm.Requests()
	var puts []fakearm.Request
	for _, q := range reqs {
		if q.Method == http.MethodPut {
			puts = append(puts, q)
		}
	}
	if len(puts) != 2 || puts[0].IfMatch == puts[1].IfMatch {
		t.Errorf("PUTs %+v: want a 412 with the old eTag, then one with the new", puts)
	}
}

func TestRegisterGivesUpWhenTheETagKeepsMoving(t *testing.T) {
	e := newEnv(t)
	e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.34.2"})
	e.arm.Inject(fakearm.Fault{Method: http.MethodPut, Status: http.StatusPreconditionFailed, Code: "PreconditionFailed", Times: 100})
	r, err := Register(context.Background(), e.c, Want{Version: "1.35.0"})
	if err == nil || r.Attempts != maxDecisions || !strings.Contains(err.Error(), "412") {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestRegisterRequiresTheAnswerToMatch(t *testing.T) {
	e := newEnv(t)
	e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.34.2"})
	e.arm.KeepVersionOnNextPut()
	_, err := Register(context.Background(), e.c, Want{Version: "1.35.0"})
	if err == nil || !strings.Contains(err.Error(), `asked for Kubernetes 1.35.0, the Machine answers "1.34.2"`) {
		t.Fatalf("got %v", err)
	}
}

func TestSameVersion(t *testing.T) {
	for _, c := range []struct {
		goal, node string
		same       bool
	}{
		{"1.35.0", "1.35.0", true}, {"v1.35.0", "1.35.0", true}, {"1.35", "1.35.2", true},
		{"1.35", "1.36.0", false}, {"1.35.1", "1.35.0", false}, {"", "1.35.0", false}, {"1.3", "1.35.0", false},
	} {
		if got := SameVersion(c.goal, c.node); got != c.same {
			t.Errorf("SameVersion(%q, %q) = %v", c.goal, c.node, got)
		}
	}
}

func TestCheckMachineNameNamesTheKey(t *testing.T) {
	if err := CheckMachineName("edge-01"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", strings.Repeat("a", 41), "node-1.site.example"} {
		err := CheckMachineName(bad)
		if err == nil || !strings.Contains(err.Error(), "agent.nodeName") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if CheckMachineName(strings.Repeat("a", 40)) != nil {
		t.Error("40 characters are allowed")
	}
}

func TestIDFromConfig(t *testing.T) {
	c := &config.Config{}
	if _, ok, err := IDFromConfig(c); ok || err != nil {
		t.Errorf("no target cluster: ok %v err %v", ok, err)
	}
	c.Azure.TargetCluster = &config.TargetCluster{ResourceID: testID("x").Cluster.String()}
	c.Agent.NodeName = "edge-01"
	id, ok, err := IDFromConfig(c)
	if !ok || err != nil || id.String() != testID("x").Cluster.String()+"/agentPools/aksflexnodes/machines/edge-01" {
		t.Errorf("%s %v %v", id, ok, err)
	}
	c.Agent.NodeName = "edge.example"
	if _, _, err := IDFromConfig(c); err == nil {
		t.Error("a dotted node name is no Machine name")
	}
}

func TestEndpointFollowsUpstreamsAudienceRule(t *testing.T) {
	for _, c := range []struct{ cloud, configured, endpoint, audience string }{
		{"AzurePublicCloud", "", "https://management.azure.com", "https://management.core.windows.net/"},
		{"AzureUSGovernmentCloud", "", "https://management.usgovcloudapi.net", "https://management.core.usgovcloudapi.net/"},
		{"AzureChinaCloud", "", "https://management.chinacloudapi.cn", "https://management.core.chinacloudapi.cn/"},
		{"AzurePublicCloud", "https://management.usgovcloudapi.net/", "https://management.usgovcloudapi.net", "https://management.core.usgovcloudapi.net/"},
		{"AzurePublicCloud", "https://arm.example.test:8443", "https://arm.example.test:8443", "https://arm.example.test:8443/"},
	} {
		e, a := Endpoint(c.cloud, c.configured)
		if e != c.endpoint || a != c.audience {
			t.Errorf("%s %q: %s %s", c.cloud, c.configured, e, a)
		}
	}
}

// A registration's requests share one token even from a source that
// caches none (start's): one token request for the four ARM requests.
func TestOneTokenServesARegistration(t *testing.T) {
	e := newEnv(t)
	o := e.opts
	o.Tokens = &identity.Source{Spec: e.spec}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Register(context.Background(), c, Want{Version: "1.35.0"}); err != nil {
		t.Fatal(err)
	}
	if n, m := e.tn.TokenRequests(), len(e.arm.Requests()); n != 1 || m != 4 {
		t.Errorf("%d token requests for %d ARM requests, want 1 for 4", n, m)
	}
}

package machineapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

// poolData is the documented example's shape (AgentPools_ListBootstrapData,
// 2026-05-02-preview), with this test's values.
func poolData(pool PoolID) map[string]any {
	return map[string]any{
		"azure": map[string]any{"cloud": "AzurePublicCloud", "targetCluster": map[string]any{"resourceId": pool.Cluster.String()},
			"targetAgentPoolName": pool.Pool, "bootstrapToken": map[string]any{"token": "abcdef.0123456789abcdef"}},
		"components": map[string]any{"kubernetes": "1.35.4"},
		"networking": map[string]any{"dnsServiceIP": "10.0.0.10"},
		"node": map[string]any{"maxPods": 110, "labels": map[string]any{"site": "edge"},
			"kubelet": map[string]any{"clusterFQDN": "flex-aks.hcp.example.test", "caCertData": "Y2E="}},
	}
}

// poolEnv is a fake Entra tenant, a fake ARM serving the action, and the
// pool's client signing in as a service principal.
func poolEnv(t *testing.T) (*PoolClient, *fakearm.Server, PoolID, string) {
	tn := fakeentra.Start(t, listen(t))
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID(), Secret: "s3cret-value"})
	arm := fakearm.Start(t, listen(t), fakearm.Options{Tokens: tn, APIVersions: []string{config.DefaultMachineAPIVersion, BootstrapDataAPIVersion}})
	spec := identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app, ClientSecret: "s3cret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}
	id, err := ParsePoolID(testID("x").PoolID())
	if err != nil {
		t.Fatal(err)
	}
	endpoint, aud := Endpoint("AzurePublicCloud", arm.URL)
	clk := &clock{}
	pc, err := NewPoolClient(id, Options{Endpoint: endpoint, Audience: aud, Tokens: &identity.Source{Spec: spec}, Identity: spec.String(),
		HTTPClient: armHTTPClient(t, arm.CAPEM), Sleep: clk.Sleep, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return pc, arm, id, app
}

func TestListBootstrapDataPostsTheDocumentedRequestAndReadsThePoolsData(t *testing.T) {
	pc, arm, id, app := poolEnv(t)
	arm.SetBootstrapData(id.String(), poolData(id))
	doc, err := pc.ListBootstrapData(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kubelet := doc["node"].(map[string]any)["kubelet"].(map[string]any)
	if kubelet["clusterFQDN"] != "flex-aks.hcp.example.test" || doc["azure"].(map[string]any)["targetAgentPoolName"] != id.Pool {
		t.Errorf("bootstrap data %v", doc)
	}
	reqs := arm.Requests()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost || reqs[0].Kind != fakearm.KindBootstrapData || reqs[0].Path != id.String()+"/listBootstrapData" ||
		reqs[0].APIVersion != BootstrapDataAPIVersion || reqs[0].AppID != app {
		t.Errorf("requests %+v", reqs)
	}
}

func TestListBootstrapDataErrorsNameThePoolAndThePermission(t *testing.T) {
	pc, arm, id, _ := poolEnv(t)
	_, err := pc.ListBootstrapData(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || !strings.Contains(err.Error(), id.String()) {
		t.Errorf("a pool without data: %v", err)
	}
	arm.SetBootstrapData(id.String(), poolData(id))
	arm.Inject(fakearm.Fault{Kind: fakearm.KindBootstrapData, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "no access"})
	_, err = pc.ListBootstrapData(context.Background())
	if err == nil || !strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), "AuthorizationFailed") || !strings.Contains(err.Error(), ListBootstrapDataPermission) {
		t.Errorf("a 403: %v", err)
	}
	// 429 is retried at Retry-After, then the data comes.
	arm.Inject(fakearm.Fault{Kind: fakearm.KindBootstrapData, Status: http.StatusTooManyRequests, Code: "TooManyRequests", RetryAfter: "3"})
	if _, err := pc.ListBootstrapData(context.Background()); err != nil {
		t.Errorf("after a 429: %v", err)
	}
}

func TestParsePoolID(t *testing.T) {
	good := testID("x").PoolID()
	if p, err := ParsePoolID(good); err != nil || p.String() != good || p.Pool != "aksflexnodes" {
		t.Errorf("ParsePoolID(%q) = %v, %v", good, p, err)
	}
	for _, bad := range []string{"", testID("x").Cluster.String(), good + "/", good + "/machines/x", "/subscriptions/not-a-guid/resourceGroups/g/providers/Microsoft.ContainerService/managedClusters/c/agentPools/p"} {
		if _, err := ParsePoolID(bad); err == nil || !strings.Contains(err.Error(), "agentPools/<pool>") && !strings.Contains(err.Error(), "not a name") {
			t.Errorf("ParsePoolID(%q) = %v; want the pool ID form named", bad, err)
		}
	}
}

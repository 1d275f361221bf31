package integration

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/fakeentra"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

// TestArcIdentity: on a host connected to Azure Arc, the agent takes the
// Arc agent's identity through its local endpoint's challenge: a request
// without credentials gets 401 naming a key file under
// /var/opt/azcmagent/tokens, which only root can read, and the request
// that presents the key gets the token. The fake endpoint serves on the
// host's own loopback (localhost:40342, where the Arc agent listens);
// preflight's identity check and the credential plugin both sign in, and
// the plugin's second call is served from its cache.
func TestArcIdentity(t *testing.T) {
	aclhost.RequireE2E(t)
	ca, err := os.ReadFile(filepath.Join(repoRoot(), "internal/config/testdata/ca.pem"))
	must(t, err)
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure": map[string]any{"arc": map[string]any{"enabled": true}},
		"agent": map[string]any{"nodeName": "arc-node", "hostPrefix": "/opt/aks-flex-node"},
		"node": map[string]any{"kubelet": map[string]any{
			"clusterFQDN": "127.0.0.1:6443", "caCertData": base64.StdEncoding.EncodeToString(ca),
		}},
	}, "", "  ")
	h := prepare(t, aclhost.ACL, cfg)

	// The tenant only mints here: the Arc agent hands out its tokens.
	tn, err := fakeentra.New(net.IPv4(127, 0, 0, 1))
	must(t, err)
	tn.Issuer = "https://login.fake-entra.test/" + tn.ID + "/v2.0"
	machine := fakeentra.Client{AppID: fakeentra.NewGUID(), ObjectID: fakeentra.NewGUID()}
	tn.AddClient(machine)
	arc := &fakeimds.Arc{Minter: tn, AppID: machine.AppID, KeyDir: "/var/opt/azcmagent/tokens",
		WriteKey: func(p string, key []byte) error { return h.WriteFile(p, key, 0o600) }}
	l, err := h.ListenTCP("127.0.0.1:40342")
	must(t, err)
	fakeimds.ServeHandler(t, l, arc)

	// Preflight signs in without writing anything.
	out, _, _ := h.Run(t.Context(), "/root/dist/aks-flex-node", "preflight")
	if !strings.Contains(out, "[OK identity]: got a token for 6dae42f8-4368-4678-94ff-3960e28e3630 from Azure Arc agent identity at http://localhost:40342/metadata/identity/oauth2/token") ||
		!strings.Contains(out, "object "+machine.ObjectID) {
		t.Errorf("preflight identity:\n%s", out)
	}
	if _, _, err := h.Run(t.Context(), "test", "-e", "/var/lib/aks-flex-node/identity"); err == nil {
		t.Error("preflight wrote the token cache")
	}

	// The plugin: a token, then the same token from the cache.
	var tokens []string
	for range 2 {
		stdout := h.RunOK(t, "/root/dist/aks-flex-node", "token", "kubelogin")
		var ec struct{ Status struct{ Token string } }
		must(t, json.Unmarshal([]byte(stdout), &ec))
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(ec.Status.Token, ".")[1])
		must(t, err)
		if !strings.Contains(string(payload), `"oid":"`+machine.ObjectID+`"`) {
			t.Errorf("token claims %s", payload)
		}
		tokens = append(tokens, ec.Status.Token)
	}
	if arc.Hits() != 2 || arc.Challenges() != 2 || tokens[0] != tokens[1] {
		t.Errorf("Arc endpoint: %d tokens, %d challenges (want 2 and 2: preflight and the plugin's first call); cached token reused: %v", arc.Hits(), arc.Challenges(), tokens[0] == tokens[1])
	}
	if mode := strings.TrimSpace(h.RunOK(t, "sh", "-c", "stat -c %a /var/lib/aks-flex-node/identity/tokens/*.json")); mode != "600" {
		t.Errorf("token cache mode %s", mode)
	}
}

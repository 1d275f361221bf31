package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

// yamlDocs splits a YAML stream into its documents as maps.
func yamlDocs(t *testing.T, data string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, d := range strings.Split(data, "---\n")[1:] {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%v:\n%s", err, d)
		}
		docs = append(docs, m)
	}
	return docs
}

func TestClusterPrepareBootstrapToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile, out := filepath.Join(dir, "token"), filepath.Join(dir, "prepare.yaml")
	if _, errOut, code := run(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile, "--output", out); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	id, secret, _ := strings.Cut(strings.TrimSpace(string(token)), ".")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{tokenFile, out} {
		if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %o, want 0600", f, fi.Mode().Perm())
		}
	}
	docs := yamlDocs(t, string(data))
	if len(docs) != 7 {
		t.Fatalf("%d objects, want the Secret, 5 bindings and the node-reader role:\n%s", len(docs), data)
	}
	sd := docs[0]["stringData"].(map[string]any)
	if docs[0]["type"] != "bootstrap.kubernetes.io/token" || sd["token-id"] != id || sd["token-secret"] != secret || sd["auth-extra-groups"] != "system:bootstrappers:aks-flex-node" {
		t.Errorf("secret %v", docs[0])
	}
	roles := map[string]string{}
	for _, d := range docs[1:] {
		if d["kind"] == "ClusterRole" {
			continue
		}
		ref := d["roleRef"].(map[string]any)
		subj := d["subjects"].([]any)[0].(map[string]any)
		roles[ref["name"].(string)] = subj["name"].(string)
	}
	if roles["system:node-bootstrapper"] != "system:bootstrappers:aks-flex-node" ||
		roles["system:certificates.k8s.io:certificatesigningrequests:nodeclient"] != "system:bootstrappers:aks-flex-node" ||
		roles["system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"] != "system:nodes" ||
		roles["aks-flex-node:node-reader"] != "system:nodes" ||
		roles["system:node-proxier"] != "system:nodes" {
		t.Errorf("bindings %v", roles)
	}
	// A re-run reads the same token.
	again, _, code := run(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile)
	if code != 0 || !strings.Contains(again, "token-secret: "+secret) {
		t.Errorf("re-run: exit %d\n%s", code, again)
	}
	// A loose token file is refused.
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile); code != ExitInvalid || !strings.Contains(errOut, "mode 0644") || strings.Contains(errOut, secret) {
		t.Errorf("loose token file: exit %d %s", code, errOut)
	}
}

func TestClusterPrepareIdentity(t *testing.T) {
	out, _, code := run(t, "cluster", "prepare", "--identity", "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The identity (its object ID in lowercase, the username Entra's
	// tokens carry) may only bootstrap a kubelet (issue 26 item 1); the
	// node-level bindings follow, for system:nodes.
	docs := yamlDocs(t, out)
	if len(docs) != 6 {
		t.Fatalf("objects:\n%s", out)
	}
	for i, role := range []string{"system:node-bootstrapper", "system:certificates.k8s.io:certificatesigningrequests:nodeclient"} {
		if docs[i]["roleRef"].(map[string]any)["name"] != role ||
			docs[i]["subjects"].([]any)[0].(map[string]any)["name"] != "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" {
			t.Errorf("objects:\n%s", out)
		}
	}
	for _, d := range docs[2:] {
		if s, ok := d["subjects"].([]any); ok && s[0].(map[string]any)["name"] != "system:nodes" {
			t.Errorf("a node-level binding names %v:\n%s", s, out)
		}
	}
	if strings.Contains(out, "name: system:node\n") {
		t.Errorf("binds the system:node role:\n%s", out)
	}
	for _, args := range [][]string{{"cluster", "prepare"}, {"cluster", "prepare", "--identity", "x"}, {"cluster", "prepare", "--identity", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "--bootstrap-token"}} {
		if _, _, code := run(t, args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// writeKubeconfig writes an admin-style kubeconfig for server.
func writeKubeconfig(t *testing.T, server string, ca []byte) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "admin-token"}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	cfg.CurrentContext = "ctx"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigGenerate(t *testing.T) {
	ca, err := os.ReadFile("../config/testdata/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	kc := writeKubeconfig(t, "https://api.example.test:6443", ca)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("sp-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if _, _, code := run(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile, "--output", filepath.Join(dir, "p.yaml")); code != 0 {
		t.Fatal("prepare")
	}
	guid := "0f0f0f0f-1111-2222-3333-444444444444"
	for name, args := range map[string][]string{
		"bootstrap-token": {"--auth", "bootstrap-token", "--token-file", tokenFile},
		"msi":             {"--auth", "msi", "--client-id", guid},
		"sp-secret":       {"--auth", "sp", "--tenant-id", guid, "--client-id", guid, "--client-secret-file", secretFile},
		"sp-cert":         {"--auth", "sp", "--tenant-id", guid, "--client-id", guid, "--client-certificate", "/etc/aks-flex-node/sp.pem", "--authority-host", "https://login.private.example/"},
		"arc":             {"--auth", "arc", "--host-prefix", "/opt/aks-flex-node"},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "config.json")
			args = append([]string{"config", "generate", "--kubeconfig", kc, "--output", out}, args...)
			if _, errOut, code := run(t, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			first, _ := os.ReadFile(out)
			if _, _, code := run(t, args...); code != 0 {
				t.Fatal("second run")
			}
			second, _ := os.ReadFile(out)
			if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 || !bytes.Equal(first, second) {
				t.Errorf("mode %o, same bytes %v", fi.Mode().Perm(), bytes.Equal(first, second))
			}
			c, err := config.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if c.Node.Kubelet.ClusterFQDN != "https://api.example.test:6443" || !bytes.Equal(c.CAPEM(), ca) {
				t.Errorf("server %s", c.Node.Kubelet.ClusterFQDN)
			}
			if name == "sp-secret" && c.Azure.ServicePrincipal.ClientSecret != "sp-secret-value" {
				t.Errorf("secret %q", c.Azure.ServicePrincipal.ClientSecret)
			}
		})
	}
	for _, args := range [][]string{
		{"--auth", "nope"},
		{"--auth", "sp", "--tenant-id", guid, "--client-id", guid},
		{"--auth", "sp", "--tenant-id", "x", "--client-id", guid, "--client-secret-file", secretFile},
		{"--auth", "bootstrap-token"},
	} {
		_, errOut, code := run(t, append([]string{"config", "generate", "--kubeconfig", kc}, args...)...)
		if code != ExitInvalid || strings.Contains(errOut, "sp-secret-value") {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errOut)
		}
	}
}

func TestTokenKubeloginCachesInIdentityDir(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := fakeentra.Start(t, l)
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: "sp-oid", Secret: "sp-secret-value"})
	dir := filepath.Join(t.TempDir(), "identity")
	if _, err := identity.SaveDir(dir, identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app,
		ClientSecret: "sp-secret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(identity.ExecInfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`)
	var tokens []string
	for range 3 {
		out, errOut, code := run(t, "token", "kubelogin", "--identity-dir", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var ec struct {
			APIVersion string
			Status     struct {
				Token               string
				ExpirationTimestamp time.Time
			}
		}
		if err := json.Unmarshal([]byte(out), &ec); err != nil || ec.APIVersion != identity.ExecAPIVersion {
			t.Fatalf("%v: %s", err, out)
		}
		if d := time.Until(ec.Status.ExpirationTimestamp); d < 50*time.Minute || d > 56*time.Minute {
			t.Errorf("expirationTimestamp in %v, want 55m (an hour less the refresh margin)", d)
		}
		payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(ec.Status.Token, ".")[1])
		if !strings.Contains(string(payload), `"oid":"sp-oid"`) {
			t.Errorf("token claims %s", payload)
		}
		tokens = append(tokens, ec.Status.Token)
	}
	if tn.TokenRequests() != 1 || tokens[0] != tokens[2] {
		t.Errorf("3 calls made %d token requests, want 1", tn.TokenRequests())
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "tokens"))
	for _, e := range entries {
		if fi, _ := e.Info(); !strings.HasPrefix(e.Name(), ".") && fi.Mode().Perm() != 0o600 {
			t.Errorf("cache file %s mode %o", e.Name(), fi.Mode().Perm())
		}
	}

	// A wrong secret: exit 1, the AADSTS code on stderr, nothing secret.
	bad := filepath.Join(t.TempDir(), "identity")
	if _, err := identity.SaveDir(bad, identity.Spec{Method: identity.MethodServicePrincipal, TenantID: tn.ID, ClientID: app,
		ClientSecret: "wrong-secret-value", AuthorityHost: tn.AuthorityHost, RootCAs: tn.CAPEM}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "token", "kubelogin", "--identity-dir", bad)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "AADSTS7000215") || strings.Contains(errOut, "wrong-secret-value") {
		t.Errorf("wrong secret: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	// A client asking for v1beta1 is told which version this plugin speaks.
	t.Setenv(identity.ExecInfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential"}`)
	if _, errOut, code := run(t, "token", "kubelogin", "--identity-dir", dir); code != ExitInvalid || !strings.Contains(errOut, "client.authentication.k8s.io/v1") {
		t.Errorf("v1beta1: exit %d %s", code, errOut)
	}
}

func TestConfigViewRedactsIdentitySecret(t *testing.T) {
	ca, _ := os.ReadFile("../config/testdata/ca.pem")
	p := writeFile(t, `{"azure":{"servicePrincipal":{"tenantId":"0f0f0f0f-1111-2222-3333-444444444444","clientId":"0f0f0f0f-1111-2222-3333-444444444444","clientSecret":"very-secret-value"}},
		"node":{"kubelet":{"clusterFQDN":"api.example.test","caCertData":"`+base64.StdEncoding.EncodeToString(ca)+`"}}}`)
	out, _, code := run(t, "config", "view", "--config", p)
	if code != 0 || strings.Contains(out, "very-secret-value") || !strings.Contains(out, `"clientSecret": "\u003credacted\u003e"`) && !strings.Contains(out, `"clientSecret": "<redacted>"`) {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// --fleet prints the rollout objects alone or after another mode's.
func TestClusterPrepareFleet(t *testing.T) {
	out, _, code := run(t, "cluster", "prepare", "--fleet")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	kinds := func(out string) []string {
		var ks []string
		for _, d := range yamlDocs(t, out) {
			ks = append(ks, d["kind"].(string))
		}
		return ks
	}
	alone := kinds(out)
	if len(alone) == 0 || alone[0] != "CustomResourceDefinition" || !slices.Contains(alone, "FlowSchema") {
		t.Fatalf("kinds %v", alone)
	}
	out, _, code = run(t, "cluster", "prepare", "--identity", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
	identityOnly := kinds(out)
	if code != 0 || len(identityOnly) == 0 {
		t.Fatalf("--identity alone: exit %d, kinds %v", code, identityOnly)
	}
	out, _, code = run(t, "cluster", "prepare", "--fleet", "--identity", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
	n := len(identityOnly)
	if got := kinds(out); code != 0 || len(got) != n+len(alone) || got[n] != "CustomResourceDefinition" || got[n+1] != "CustomResourceDefinition" {
		t.Fatalf("with --identity: exit %d, kinds %v (the identity's %d objects, then the fleet's %d)", code, got, n, len(alone))
	}
}

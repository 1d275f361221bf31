package config

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func caData(t *testing.T) string {
	t.Helper()
	pemBytes, err := os.ReadFile("testdata/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pemBytes)
}

// base is a minimal valid config: bootstrap token, server and CA.
func base(t *testing.T) map[string]any {
	return map[string]any{
		"azure": map[string]any{"bootstrapToken": map[string]any{"token": "abcdef.0123456789abcdef"}},
		"agent": map[string]any{"nodeName": "node-1"},
		"node":  map[string]any{"kubelet": map[string]any{"clusterFQDN": "api.example.test", "caCertData": caData(t)}},
	}
}

// set assigns v at a dotted path, creating objects on the way; nil deletes.
func set(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	if v == nil {
		delete(m, parts[len(parts)-1])
		return
	}
	m[parts[len(parts)-1]] = v
}

func parse(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return Parse("test.json", data)
}

func TestBaseIsValid(t *testing.T) {
	c, err := parse(t, base(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Kubelet.ClusterFQDN != "https://api.example.test:443" {
		t.Errorf("clusterFQDN not normalised: %q", c.Node.Kubelet.ClusterFQDN)
	}
}

func TestValidationRules(t *testing.T) {
	const guid = "00000000-0000-0000-0000-000000000001"
	const rid = "/subscriptions/" + guid + "/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1"
	cases := []struct {
		name    string
		edits   map[string]any
		path    string // expected error path ("" = must be valid)
		contain string
	}{
		{"token format", map[string]any{"azure.bootstrapToken.token": "ABCDEF.0123456789abcdef"}, "azure.bootstrapToken.token", BootstrapTokenFormat},
		{"token short", map[string]any{"azure.bootstrapToken.token": "abcdef.0123"}, "azure.bootstrapToken.token", "must be"},
		{"tenant guid", map[string]any{"azure.tenantId": "123"}, "azure.tenantId", "not a GUID"},
		{"cloud", map[string]any{"azure.cloud": "Mars"}, "azure.cloud", "not a known cloud"},
		{"log level", map[string]any{"agent.logLevel": "verbose"}, "agent.logLevel", "debug, info, warning, error"},
		{"log level warning ok", map[string]any{"agent.logLevel": "warning"}, "", ""},
		{"log dir relative", map[string]any{"agent.logDir": "logs"}, "agent.logDir", "absolute"},
		{"node name upper", map[string]any{"agent.nodeName": "Node_1"}, "agent.nodeName", "DNS-1123"},
		{"node name dots ok", map[string]any{"agent.nodeName": "node-1.site.example"}, "", ""},
		{"node name long label", map[string]any{"agent.nodeName": strings.Repeat("a", 64)}, "agent.nodeName", "DNS-1123"},
		{"duration", map[string]any{"agent.machineReconcileInterval": "5"}, "agent.machineReconcileInterval", "duration"},
		{"duration negative", map[string]any{"agent.machineReconcileInterval": "-5s"}, "agent.machineReconcileInterval", "positive"},
		{"metrics address no port", map[string]any{"agent.metricsAddress": "127.0.0.1"}, "agent.metricsAddress", "not host:port"},
		{"metrics address name", map[string]any{"agent.metricsAddress": "metrics.example:9464"}, "agent.metricsAddress", "not an IP address"},
		{"metrics address port", map[string]any{"agent.metricsAddress": ":99999"}, "agent.metricsAddress", "1 to 65535"},
		{"metrics address ok", map[string]any{"agent.metricsAddress": "0.0.0.0:9464"}, "", ""},
		{"prefix", map[string]any{"agent.hostPrefix": "/opt/aks flex"}, "agent.hostPrefix", "' ' at offset 8"},
		{"prefix ok", map[string]any{"agent.hostPrefix": "/opt/aks-flex-node"}, "", ""},
		{"k8s version", map[string]any{"components.kubernetes": "latest"}, "components.kubernetes", "version"},
		{"k8s version v ok", map[string]any{"components.kubernetes": "v1.35.1"}, "", ""},
		{"containerd version", map[string]any{"components.containerd": "2"}, "components.containerd", "version"},
		{"runc version", map[string]any{"components.runc": "x"}, "components.runc", "version"},
		{"sandbox image", map[string]any{"components.sandboxImage": "a b"}, "components.sandboxImage", "image reference"},
		{"oci image url", map[string]any{"bootstrap.ociImage": "https://x/y"}, "bootstrap.ociImage", "registry reference"},
		{"oci layout ok", map[string]any{"bootstrap.ociImage": "oci-layout:///var/lib/img:v1"}, "", ""},
		{"oci layout no tag", map[string]any{"bootstrap.ociImage": "oci-layout:///var/lib/img"}, "bootstrap.ociImage", "missing tag"},
		{"oci layout relative", map[string]any{"bootstrap.ociImage": "oci-layout://img:v1"}, "bootstrap.ociImage", "absolute"},
		{"offline source relative", map[string]any{"bootstrap.offlineArtifacts.source": "bundle"}, "bootstrap.offlineArtifacts.source", "absolute path"},
		{"offline source template", map[string]any{"bootstrap.offlineArtifacts.source": "/b/{{ .KubernetesVersion"}, "bootstrap.offlineArtifacts.source", "template"},
		{"offline source file ok", map[string]any{"bootstrap.offlineArtifacts.source": "file:///b/{{ .KubernetesVersion }}"}, "", ""},
		{"offline source oci ok", map[string]any{"bootstrap.offlineArtifacts.source": "oci://127.0.0.1:5000/a/b:k8s-{{ .KubernetesVersion }}"}, "", ""},
		{"plain http needs oci", map[string]any{"bootstrap.offlineArtifacts.source": "/b", "bootstrap.offlineArtifacts.plainHTTP": true}, "bootstrap.offlineArtifacts.plainHTTP", "applies only to an oci://"},
		{"image plain http needs a registry", map[string]any{"bootstrap.ociImage": "oci-layout:///var/lib/img:v1", "bootstrap.ociImagePlainHTTP": true}, "bootstrap.ociImagePlainHTTP", "applies only to a registry reference"},
		{"image plain http needs an image", map[string]any{"bootstrap.ociImagePlainHTTP": true}, "bootstrap.ociImagePlainHTTP", "applies only to a registry reference"},
		{"image plain http ok", map[string]any{"bootstrap.ociImage": "10.1.2.3:5000/worker:v1", "bootstrap.ociImagePlainHTTP": true}, "", ""},
		{"plain http oci ok", map[string]any{"bootstrap.offlineArtifacts.source": "oci://10.1.2.3:5000/a/b:v1", "bootstrap.offlineArtifacts.plainHTTP": true}, "", ""},
		{"host device", map[string]any{"bootstrap.additionalHostDevices": []any{"/dev/fuse", "/etc/passwd"}}, "bootstrap.additionalHostDevices[1]", "under /dev/"},
		{"dns ip", map[string]any{"networking.dnsServiceIP": "10.0.0"}, "networking.dnsServiceIP", "IP"},
		{"cni version", map[string]any{"networking.cniVersion": "one"}, "networking.cniVersion", "version"},
		{"max pods", map[string]any{"node.maxPods": 500}, "node.maxPods", "between 1 and 250"},
		{"label key", map[string]any{"node.labels": map[string]any{"bad key": "v"}}, "node.labels.bad key", "key name"},
		{"label prefix", map[string]any{"node.labels": map[string]any{"Bad_Prefix/k": "v"}}, "node.labels.Bad_Prefix/k", "prefix"},
		{"label value", map[string]any{"node.labels": map[string]any{"k": "-v"}}, "node.labels.k", "value"},
		{"labels ok", map[string]any{"node.labels": map[string]any{"example.com/role": "edge", "k": ""}}, "", ""},
		{"label key two slashes", map[string]any{"node.labels": map[string]any{"a/b/c": "v"}}, "node.labels.a/b/c", "key name"},
		{"label prefix long label", map[string]any{"node.labels": map[string]any{strings.Repeat("a", 64) + ".com/k": "v"}}, "node.labels." + strings.Repeat("a", 64) + ".com/k", "prefix"},
		{"label value long", map[string]any{"node.labels": map[string]any{"k": strings.Repeat("v", 64)}}, "node.labels.k", "at most 63"},
		{"node name empty label", map[string]any{"agent.nodeName": "a..b"}, "agent.nodeName", "DNS-1123"},
		{"taint no effect", map[string]any{"node.taints": []any{"k=v"}}, "node.taints[0]", "key[=value]:Effect"},
		{"taint effect", map[string]any{"node.taints": []any{"k=v:Never"}}, "node.taints[0]", "NoSchedule"},
		{"taint key", map[string]any{"node.taints": []any{"b@d:NoSchedule"}}, "node.taints[0]", "key"},
		{"taints ok", map[string]any{"node.taints": []any{"k=v:NoSchedule", "k2:NoExecute"}}, "", ""},
		{"fqdn path", map[string]any{"node.kubelet.clusterFQDN": "api.example.test/x"}, "node.kubelet.clusterFQDN", "path"},
		{"fqdn userinfo", map[string]any{"node.kubelet.clusterFQDN": "https://u:p@api.example.test"}, "node.kubelet.clusterFQDN", "user info"},
		{"fqdn query", map[string]any{"node.kubelet.clusterFQDN": "api.example.test?x=1"}, "node.kubelet.clusterFQDN", "query"},
		{"fqdn http", map[string]any{"node.kubelet.clusterFQDN": "http://api.example.test"}, "node.kubelet.clusterFQDN", "https"},
		{"fqdn port", map[string]any{"node.kubelet.clusterFQDN": "api.example.test:99999"}, "node.kubelet.clusterFQDN", "port"},
		{"fqdn required", map[string]any{"node.kubelet.clusterFQDN": nil}, "node.kubelet.clusterFQDN", "required"},
		{"ca required", map[string]any{"node.kubelet.caCertData": nil}, "node.kubelet.caCertData", "required"},
		{"ca not base64", map[string]any{"node.kubelet.caCertData": "!!!"}, "node.kubelet.caCertData", "base64"},
		{"ca no pem", map[string]any{"node.kubelet.caCertData": base64.StdEncoding.EncodeToString([]byte("hello"))}, "node.kubelet.caCertData", "no PEM certificate"},
		{"ca bad cert", map[string]any{"node.kubelet.caCertData": base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n"))}, "node.kubelet.caCertData", "does not parse"},
		{"node ip", map[string]any{"node.kubelet.nodeIP": "1.2.3"}, "node.kubelet.nodeIP", "IP"},
		{"verbosity", map[string]any{"node.kubelet.verbosity": 11}, "node.kubelet.verbosity", "between 0 and 10"},
		{"verbosity zero ok", map[string]any{"node.kubelet.verbosity": 0}, "", ""},
		{"gc high", map[string]any{"node.kubelet.imageGCHighThreshold": 101}, "node.kubelet.imageGCHighThreshold", "between 1 and 100"},
		{"gc low >= high", map[string]any{"node.kubelet.imageGCLowThreshold": 90}, "node.kubelet.imageGCLowThreshold", "lower than"},
		{"no auth", map[string]any{"azure.bootstrapToken": nil}, "azure", "no authentication method"},
		{"two azure methods", map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{}, "azure.arc": map[string]any{"enabled": true}}, "azure", "exactly one authentication method may be set, found azure.managedIdentity, azure.arc"},
		{"token plus mi refused", map[string]any{"azure.managedIdentity": map[string]any{"clientId": guid}}, "azure", "found azure.bootstrapToken, azure.managedIdentity"},
		{"mi ok", map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{"clientId": guid}}, "", ""},
		{"mi system-assigned ok", map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{}}, "", ""},
		{"mi needs fqdn", map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{}, "node.kubelet.clusterFQDN": nil}, "node.kubelet.clusterFQDN", "is required with azure.managedIdentity (aks-flex-node does not discover the cluster"},
		{"sp needs ca", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": guid, "clientSecret": "s"}, "node.kubelet.caCertData": nil}, "node.kubelet.caCertData", "is required with azure.servicePrincipal"},
		{"mi client id", map[string]any{"azure.bootstrapToken": nil, "azure.managedIdentity": map[string]any{"clientId": "x"}}, "azure.managedIdentity.clientId", "GUID"},
		{"sp fields", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": "x", "clientSecret": "s"}}, "azure.servicePrincipal.clientId", "GUID"},
		{"sp credential", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": guid}}, "azure.servicePrincipal", "set clientSecret or clientCertificatePath"},
		{"sp two credentials", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": guid, "clientSecret": "s3cret", "clientCertificatePath": "/etc/aks-flex-node/sp.pem"}}, "azure.servicePrincipal", "not both"},
		{"sp cert relative", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": guid, "clientCertificatePath": "sp.pem"}}, "azure.servicePrincipal.clientCertificatePath", "absolute"},
		{"sp cert ok", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"tenantId": guid, "clientId": guid, "clientCertificatePath": "/etc/aks-flex-node/sp.pem"}}, "", ""},
		{"sp tenant required", map[string]any{"azure.bootstrapToken": nil, "azure.servicePrincipal": map[string]any{"clientId": guid, "clientSecret": "s"}}, "azure.servicePrincipal.tenantId", "required"},
		{"sp tenant from azure", map[string]any{"azure.bootstrapToken": nil, "azure.tenantId": guid, "azure.servicePrincipal": map[string]any{"clientId": guid, "clientSecret": "s"}}, "", ""},
		{"authority host http", map[string]any{"azure.authorityHost": "http://login.example.test/"}, "azure.authorityHost", "https URL"},
		{"authority host ok", map[string]any{"azure.authorityHost": "https://login.example.test/"}, "", ""},
		{"arc ok", map[string]any{"azure.bootstrapToken": nil, "azure.arc": map[string]any{"enabled": true}}, "", ""},
		{"arc disabled is no method", map[string]any{"azure.bootstrapToken": nil, "azure.arc": map[string]any{"enabled": false}}, "azure", "no authentication method"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := base(t)
			for p, v := range tc.edits {
				set(m, p, v)
			}
			_, err := parse(t, m)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ve ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("want ValidationErrors, got %v", err)
			}
			for _, e := range ve {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.contain) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.contain, ve)
		})
	}
}

func TestValidationReportsEverythingAtOnce(t *testing.T) {
	m := base(t)
	set(m, "agent.logLevel", "loud")
	set(m, "agent.hostPrefix", "relative")
	set(m, "node.maxPods", 0.0)
	set(m, "node.maxPods", 999)
	set(m, "azure.bootstrapToken.token", "bad")
	_, err := parse(t, m)
	var ve ValidationErrors
	if !errors.As(err, &ve) || len(ve) != 4 {
		t.Fatalf("want 4 errors, got %v", err)
	}
	if strings.Contains(err.Error(), "\"bad\"") {
		t.Errorf("the token value leaked into the error: %v", err)
	}
}

func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.test":             "https://api.example.test:443",
		"api.example.test:6443":        "https://api.example.test:6443",
		"https://api.example.test":     "https://api.example.test:443",
		"https://api.example.test/":    "https://api.example.test:443",
		"127.0.0.1:6443":               "https://127.0.0.1:6443",
		"https://[::1]:6443":           "https://[::1]:6443",
		"https://api.example.test:444": "https://api.example.test:444",
	} {
		got, err := ServerURL(in)
		if err != nil || got != want {
			t.Errorf("ServerURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"empty", "  \n", "the file is empty"},
		{"not json", "hello", "line 1, column 1: not valid JSON"},
		{"truncated", "{\"agent\": ", "line 1, column 10: not valid JSON: unexpected end of JSON input"},
		{"syntax position", "{\n  \"agent\": {\n    \"logLevel\" \"x\"\n  }\n}", "line 3, column 16: not valid JSON"},
		{"array document", "[]", "the document must be a JSON object, found an array"},
		{"unknown key suggestion", `{"agent": {"hostprefix": "/opt/x"}}`, "agent.hostprefix: unknown key; did you mean agent.hostPrefix? (line 1, column 12)"},
		{"unknown key typo", `{"agent": {"hostPrefx": "/opt/x"}}`, "did you mean agent.hostPrefix?"},
		{"unknown key list", `{"zzz": 1}`, "zzz: unknown key (known keys here: agent, azure, bootstrap, components, hostRouting, networking, node)"},
		{"wrong type string", `{"agent": {"logLevel": 3}}`, "agent.logLevel: must be a string, found a number (line 1, column 24)"},
		{"wrong type int", `{"node": {"maxPods": "110"}}`, "node.maxPods: must be an integer, found a string"},
		{"fractional int", `{"node": {"maxPods": 1.5}}`, "node.maxPods: must be an integer, found 1.5"},
		{"wrong type bool", `{"azure": {"arc": {"enabled": "yes"}}}`, "azure.arc.enabled: must be true or false, found a string"},
		{"wrong type list", `{"node": {"taints": "a:NoSchedule"}}`, "node.taints: must be a list of strings, found a string"},
		{"wrong type map", `{"node": {"labels": ["a"]}}`, "node.labels: must be an object of strings, found an array"},
		{"wrong map value", `{"node": {"labels": {"a": 1}}}`, "node.labels.a: must be a string, found a number"},
		{"wrong section", `{"agent": "x"}`, "agent: must be an object, found a string"},
		{"duplicate", `{"agent": {}, "agent": {}}`, "agent: duplicate key \"agent\" (line 1, column 15)"},
		{"nested duplicate", `{"node": {"labels": {"a": "1", "a": "2"}}}`, "node.labels.a: duplicate key \"a\" (line 1, column 32)"},
		// The tree parse recurses per level: a few MB of '[' used to
		// overflow the Go stack and kill the process.
		{"too deep", strings.Repeat("[", 1<<20-1), "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: objects and lists nested more than 32 deep; a config document is at most 32 levels deep (line 1, column 33)"},
		{"too deep in a key", `{"node": {"labels": ` + strings.Repeat(`{"a": `, 40), "node.labels" + strings.Repeat(".a", 30) + ": objects and lists nested more than 32 deep"},
		{"too large", strings.Repeat("[", 4<<20), "the file is 4194304 bytes; a config document is at most 1048576 bytes (1 MiB)"},
		{"trailing data", `{} {}`, "line 1, column 4: not valid JSON: invalid character '{' after top-level value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc))
			if err == nil {
				t.Fatal("want error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to contain %q", err.Error(), tc.want)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("want one line, got %q", err.Error())
			}
		})
	}
}

func TestDecodeReportsAllKeyProblems(t *testing.T) {
	_, err := Decode([]byte(`{"agent": {"hostprefix": "/x", "logLevel": 1}, "nod": {}}`))
	var de DecodeErrors
	if !errors.As(err, &de) || len(de) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	Hostname = func() (string, error) { return "My-Host", nil }
	defer func() { Hostname = os.Hostname }()
	m := base(t)
	set(m, "agent.nodeName", nil)
	c, err := parse(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.NodeName != "my-host" {
		t.Errorf("nodeName default = %q, want lowercased hostname", c.Agent.NodeName)
	}
	if c.Agent.LogLevel != "info" || c.Agent.LogDir != "/var/log/aks-flex-node" || c.Node.MaxPods != 110 ||
		*c.Node.Kubelet.Verbosity != 2 || c.Components.Kubernetes != DefaultKubernetesVersion || c.Azure.Cloud != DefaultCloud ||
		c.Agent.HostPrefix != "" {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestRedacted(t *testing.T) {
	m := base(t)
	c, err := parse(t, m)
	if err != nil {
		t.Fatal(err)
	}
	c.Azure.ServicePrincipal = &ServicePrincipal{ClientSecret: "s3cret"}
	out, _ := json.Marshal(c.Redacted())
	if strings.Contains(string(out), "0123456789abcdef") || strings.Contains(string(out), "s3cret") {
		t.Errorf("secret in redacted output: %s", out)
	}
	if r := c.Redacted(); r.Azure.BootstrapToken.Token != "abcdef.<redacted>" {
		t.Errorf("token id should stay visible: %s", out)
	}
	if c.Azure.BootstrapToken.Token != "abcdef.0123456789abcdef" {
		t.Error("Redacted modified the original")
	}
}

func TestExamplesStayValid(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if strings.Contains(f, "acl") && c.Agent.HostPrefix != "/opt/aks-flex-node" {
			t.Errorf("%s: the ACL example must set agent.hostPrefix", f)
		}
	}
}

func TestLookupLayout(t *testing.T) {
	root := t.TempDir()
	cfgPath := "/etc/aks-flex-node/config.json"
	// Absent: default layout.
	l, err := LookupLayout(root, cfgPath, nil)
	if err != nil || l.Prefix() != "" || l.BinDir() != "/usr/local/bin" {
		t.Fatalf("absent config: %+v, %v", l, err)
	}
	// Present and valid: its prefix.
	m := base(t)
	set(m, "agent.hostPrefix", "/opt/aks-flex-node")
	data, _ := json.Marshal(m)
	if err := os.MkdirAll(filepath.Join(root, "etc/aks-flex-node"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, cfgPath), data, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err = LookupLayout(root, cfgPath, nil)
	if err != nil || l.AgentBinary() != "/opt/aks-flex-node/bin/aks-flex-node" || l.ConfigFile() != cfgPath {
		t.Fatalf("valid config: %+v, %v", l, err)
	}
	// Present but invalid: an error naming the file.
	if err := os.WriteFile(filepath.Join(root, cfgPath), []byte(`{"agent":{"hostprefix":"/opt/x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LookupLayout(root, cfgPath, nil)
	if err == nil || !strings.Contains(err.Error(), cfgPath) || !strings.Contains(err.Error(), "agent.hostprefix") {
		t.Fatalf("invalid config: %v", err)
	}
	// Unreadable (a directory where the file should be): default layout.
	if err := os.Remove(filepath.Join(root, cfgPath)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err = LookupLayout(root, cfgPath, nil)
	if err != nil || l.Prefix() != "" {
		t.Fatalf("unreadable config: %+v, %v", l, err)
	}
}

// An empty host in agent.metricsAddress is loopback: the agent's metrics
// reach further only when an address says so.
func TestMetricsAddressDefaultsToLoopback(t *testing.T) {
	for in, want := range map[string]string{":9464": "127.0.0.1:9464", "localhost:9464": "localhost:9464", "[::1]:9464": "[::1]:9464", "0.0.0.0:9464": "0.0.0.0:9464"} {
		got, err := MetricsListenAddress(in)
		if err != nil || got != want {
			t.Errorf("MetricsListenAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

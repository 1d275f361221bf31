package supportbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Secrets planted where a joined host keeps them, and where they leak
// into logs; none may be in the bundle.
var planted = map[string]string{
	"bootstrap token secret":        "0123456789abcdef",
	"client secret":                 "Pl4nted~Client.Secret_value-42",
	"kubeconfig key data":           "UExBTlRFRC1LVUJFQ09ORklHLUtFWS1EQVRB",
	"kubeconfig token":              "planted-kubeconfig-bearer-token-123",
	"private key in a log":          "MIIplantedKEYmaterialInALogLine",
	"JWT in a journal":              "eyJzdWIiOiJwbGFudGVkIn0",
	"password in a CNI file":        "cni-planted-password",
	"kubelet's private key":         "MIIplantedKubeletPKIkey",
	"token flag in a journal":       "q7x9ab.0123456789abcdef",
	"SAS signature in rollout.json": "plantedSASsig0123456789",
	"URL password in rollout.json":  "plantedURLpassw0rd",
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// joinedHost plants a joined host's files, with secrets, in a temp root.
func joinedHost(t *testing.T) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	on := l.OnRoot
	write(t, on(l.ConfigFile()), `{"azure":{"bootstrapToken":{"token":"q7x9ab.0123456789abcdef"},"servicePrincipal":{"tenantId":"t","clientId":"c","clientSecret":"Pl4nted~Client.Secret_value-42"}},"agent":{"nodeName":"node-1"}}`)
	write(t, on(l.JoinedMarker()), "")
	if _, err := state.OpenDir(on(l.StateDir())).SaveApplied(state.Applied{NodeName: "node-1", Machine: "kube1", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	write(t, on(l.StateDir()+"/upgrade-result"), "result=upgraded\n")
	write(t, on(l.RolloutRecord()), `{"rollout":"r1","generation":2,"phase":"Updated","applied":{"rollout":"r1","generation":2,"release":{"kubernetesVersion":"v1.35.4",`+
		`"artifacts":"https://edge:plantedURLpassw0rd@bundles.test/k8s.tar","agent":{"url":"https://blob.test/aks-flex-node?sv=2024&sig=plantedSASsig0123456789","sha256":"ab"}}}}`)
	write(t, on(l.BundlesDir()+"/k8s-1.35.4/manifest.json"), `{"schemaVersion":1}`)
	write(t, on(l.BundlesDir()+"/k8s-1.35.4/blobs/kubelet"), "a large binary the bundle must not carry")
	write(t, on(l.Units().Agent), "[Service]\nExecStart=/opt/aks-flex-node/lib/current agent\n")
	write(t, on(l.LogDir()+"/agent.log"), "time=x level=INFO msg=ok\n-----BEGIN RSA PRIVATE KEY-----\nMIIplantedKEYmaterialInALogLine\n-----END RSA PRIVATE KEY-----\n")
	m := on(l.MachineDir("kube1"))
	key := base64.StdEncoding.EncodeToString([]byte("PLANTED-KUBECONFIG-KEY-DATA"))
	write(t, m+node.KubeletKubeconf, "apiVersion: v1\nusers:\n- name: u\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: "+key+"\n    token: planted-kubeconfig-bearer-token-123\n")
	write(t, m+node.BootstrapKubeconf, "users:\n- name: b\n  user:\n    token: q7x9ab.0123456789abcdef\n")
	write(t, m+node.KubeletConfigFile, "rotateCertificates: true\n")
	write(t, m+node.CNIConfDir+"/10-custom.conflist", `{"name":"custom","plugins":[{"type":"x","password":"cni-planted-password"}]}`)
	write(t, m+node.KubeletPKIDir+"/kubelet-client-current.pem", "-----BEGIN EC PRIVATE KEY-----\nMIIplantedKubeletPKIkey\n-----END EC PRIVATE KEY-----\n")
	return l
}

// fakeExec answers the bundle's commands: journals that carry a token
// and a bearer JWT, the ip tool, and no nft on this host.
func fakeExec(_ context.Context, name string, args ...string) ([]byte, error) {
	switch name {
	case "journalctl":
		return []byte("2025-01-02T03:04:05+0000 host kubelet[1]: Flag --token=q7x9ab.0123456789abcdef\n" +
			"2025-01-02T03:04:06+0000 host agent[2]: GET / Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJl\n"), nil
	case "ip", "uname", "df":
		return []byte(name + " " + strings.Join(args, " ") + ": output\n"), nil
	case "systemctl":
		if args[0] == "show" {
			return []byte("ActiveState=inactive\n"), nil
		}
	}
	return nil, errors.New(`exec: "` + name + `": executable file not found in $PATH`)
}

// members reads the archive: names and contents, and the raw bytes of
// the whole decompressed stream (headers included).
func members(t *testing.T, path string) (map[string]string, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o600 {
			t.Errorf("%s mode %o", h.Name, h.Mode)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name[strings.Index(h.Name, "/")+1:]] = string(b)
	}
	return out, raw
}

func TestBundleOfAJoinedHostHoldsNoSecret(t *testing.T) {
	l := joinedHost(t)
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	res, err := Collect(context.Background(), Options{Layout: l, Output: out, Exec: fakeExec,
		Preflight: func(context.Context) (any, error) { return map[string]string{"status": "ok"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bundle %v %v, want mode 0600", fi, err)
	}
	got, raw := members(t, out)
	for what, secret := range planted {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the bundle holds the %s %q", what, secret)
		}
	}
	for _, want := range []string{
		"manifest.json", "reports/version.json", "reports/status.json", "reports/debug.json", "reports/debug.txt", "reports/preflight.json",
		"host/config.json", "host/addresses", "host/routes", "host/rules", "units/host/aks-flex-node-agent.service",
		"state/state.json", "state/upgrade-result", "state/bundles/k8s-1.35.4/manifest.json", "logs/agent/agent.log",
		"machines/kube1/etc/kubernetes/kubelet.conf", "machines/kube1/etc/kubernetes/bootstrap-kubelet.conf",
		"machines/kube1/var/lib/kubelet/config.yaml", "machines/kube1/etc/cni/net.d/10-custom.conflist",
		"logs/journal/aks-flex-node-agent.service.log", "logs/journal/kube1/kubelet.service.log",
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("no %s in the bundle", want)
		}
	}
	for name := range got {
		if strings.Contains(name, "pki") || strings.Contains(name, "blobs") {
			t.Errorf("the bundle carries %s", name)
		}
	}
	// The rollout record is there for the rollout check's reader; its
	// release URLs keep their host and path.
	if r := got["state/rollout.json"]; !strings.Contains(r, `"kubernetesVersion":"v1.35.4"`) || !strings.Contains(r, "https://blob.test/aks-flex-node?sv=2024&sig=REDACTED") ||
		!strings.Contains(r, "https://edge:REDACTED@bundles.test/k8s.tar") {
		t.Errorf("state/rollout.json:\n%s", r)
	}
	// What stays readable: the token's ID, the certificate data, the keys.
	if kc := got["machines/kube1/etc/kubernetes/kubelet.conf"]; !strings.Contains(kc, "client-certificate-data: Q0VSVA==") || !strings.Contains(kc, "client-key-data: REDACTED") {
		t.Errorf("kubelet.conf:\n%s", kc)
	}
	if j := got["logs/journal/aks-flex-node-agent.service.log"]; !strings.Contains(j, "--token=REDACTED") && !strings.Contains(j, "q7x9ab.REDACTED") {
		t.Errorf("journal:\n%s", j)
	}
	var m Manifest
	if err := json.Unmarshal([]byte(got["manifest.json"]), &m); err != nil || !m.Joined || m.Node != "node-1" || m.Redactions < 8 {
		t.Errorf("manifest: %+v %v", m, err)
	}
	if !strings.Contains(strings.Join(missingPaths(m), ","), "host/nftables") {
		t.Errorf("a missing tool is not listed: %v", m.Missing)
	}
	if s := res.Summary(); !strings.HasPrefix(s, "bundle "+out+": ") || !strings.Contains(s, "secrets redacted") {
		t.Errorf("summary %q", s)
	}
	// The real tar opens it.
	if tarBin, err := exec.LookPath("tar"); err == nil {
		if b, err := exec.Command(tarBin, "-tzf", out).CombinedOutput(); err != nil || !strings.Contains(string(b), "/manifest.json") {
			t.Errorf("tar -tzf: %v\n%s", err, b)
		}
	}
}

func missingPaths(m Manifest) []string {
	var out []string
	for _, x := range m.Missing {
		out = append(out, x.Path)
	}
	return out
}

// A host that never joined still gets a bundle, which says what is
// missing and why.
func TestBundleOfAnUnjoinedHost(t *testing.T) {
	l, _ := layout.New(t.TempDir(), "", "")
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	res, err := Collect(context.Background(), Options{Layout: l, Output: out, Exec: fakeExec})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := members(t, out)
	if _, ok := got["reports/debug.txt"]; !ok || !strings.Contains(got["reports/debug.txt"], "[ERROR joined]") {
		t.Errorf("debug report: %q", got["reports/debug.txt"])
	}
	miss := strings.Join(missingPaths(*res.Manifest), ",")
	for _, want := range []string{"node", "state", "machines/kube1", "host/config.json"} {
		if !strings.Contains(miss, want) {
			t.Errorf("missing does not list %s: %s", want, miss)
		}
	}
	if s := res.Summary(); !strings.Contains(s, "host not joined") {
		t.Errorf("summary %q", s)
	}
}

// The members' total stays under the cap: logs are cut, and what does
// not fit is listed.
func TestBundleSizeCap(t *testing.T) {
	l := joinedHost(t)
	big := strings.Repeat("2025-01-02T03:04:05+0000 host kubelet[1]: a line of a chatty log\n", 20000)
	exec := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "journalctl" {
			return []byte(big), nil
		}
		return fakeExec(ctx, name, args...)
	}
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	res, err := Collect(context.Background(), Options{Layout: l, Output: out, Exec: exec, MaxBytes: 256 << 10, JournalMax: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	cut := 0
	for _, m := range res.Manifest.Members {
		total += m.Bytes
		if m.Truncated != "" {
			cut++
		}
	}
	if total > 256<<10 {
		t.Errorf("members total %d bytes, over the cap", total)
	}
	if cut == 0 && !strings.Contains(strings.Join(missingPaths(*res.Manifest), ","), "logs/journal") {
		t.Errorf("nothing was cut or left out: %+v", res.Manifest.Members)
	}
}

package supportbundle

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// nested is {"a":{"b":{"c":v}}} for path a.b.c.
func nested(path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	out := map[string]any{keys[len(keys)-1]: v}
	for i := len(keys) - 2; i >= 0; i-- {
		out = map[string]any{keys[i]: out}
	}
	return out
}

// Issue 26 item 5: every config key internal/config marks secret is
// redacted by its JSON path in the bundle's host/config.json, whatever
// its value looks like: a kubeconfig embedded as base64 (agent.kubeconfigData,
// node.kubelet.kubeconfigData) hides its token and key from every
// pattern. A key added to config.SecretPaths is covered here without a
// change to this test.
func TestBundleRedactsEveryConfigSecretPath(t *testing.T) {
	paths := config.SecretPaths()
	if len(paths) < 4 {
		t.Fatalf("config.SecretPaths() = %v: the known secret keys are missing", paths)
	}
	for i, p := range paths {
		t.Run(p, func(t *testing.T) {
			l, err := layout.New(t.TempDir(), "", "")
			if err != nil {
				t.Fatal(err)
			}
			kubeconfig := fmt.Sprintf("apiVersion: v1\nusers:\n- name: u\n  user:\n    token: planted-%d-bearer\n    client-key-data: UExBTlRFRC1LRVk=\n", i)
			value := base64.StdEncoding.EncodeToString([]byte(kubeconfig))
			data, _ := json.Marshal(nested(p, value))
			write(t, l.OnRoot(l.ConfigFile()), string(data))
			// The same value in a log: the bundle hides it there too.
			write(t, l.OnRoot(l.LogDir()+"/agent.log"), "level=DEBUG msg=loaded data="+value+"\n")
			out := filepath.Join(t.TempDir(), "bundle.tar.gz")
			if _, err := Collect(context.Background(), Options{Layout: l, Output: out, Exec: fakeExec}); err != nil {
				t.Fatal(err)
			}
			got, raw := members(t, out)
			if bytes.Contains(raw, []byte(value)) {
				t.Errorf("the bundle holds %s's value in clear", p)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(got["host/config.json"]), &doc); err != nil {
				t.Fatalf("host/config.json: %v\n%s", err, got["host/config.json"])
			}
			var v any = doc
			for _, k := range strings.Split(p, ".") {
				m, _ := v.(map[string]any)
				v = m[k]
			}
			if v != Redacted {
				t.Errorf("host/config.json: %s = %v, want %q", p, v, Redacted)
			}
		})
	}
}

// A config that does not parse cannot be redacted by path: it is left
// out and the manifest says why, rather than shipped on patterns alone.
func TestBundleLeavesOutAConfigThatDoesNotParse(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	value := base64.StdEncoding.EncodeToString([]byte("users:\n- user:\n    token: planted-unparsed\n"))
	write(t, l.OnRoot(l.ConfigFile()), `{"agent":{"kubeconfigData":"`+value+`"},`)
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	res, err := Collect(context.Background(), Options{Layout: l, Output: out, Exec: fakeExec})
	if err != nil {
		t.Fatal(err)
	}
	got, raw := members(t, out)
	if bytes.Contains(raw, []byte(value)) {
		t.Error("the bundle holds the unparsed config's kubeconfigData in clear")
	}
	if _, ok := got["host/config.json"]; ok {
		t.Error("host/config.json is in the bundle although it does not parse")
	}
	found := false
	for _, m := range res.Manifest.Missing {
		found = found || (m.Path == "host/config.json" && strings.Contains(m.Reason, "JSON"))
	}
	if !found {
		t.Errorf("manifest does not say why host/config.json is missing: %+v", res.Manifest.Missing)
	}
}

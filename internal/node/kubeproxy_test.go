package node

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/config"
)

// kubeProxyConfig is testConfig with networking.kubeProxy "agent".
func kubeProxyConfig() *config.Config {
	c := testConfig()
	c.Networking.KubeProxy = config.KubeProxyAgent
	return c
}

// The agent's kube-proxy: its config, unit and link are rendered only
// with networking.kubeProxy "agent"; its config signs in with the
// kubelet's kubeconfig as the node, finds local traffic by the node's
// bridge and runs in the mode the config names, else the host's.
func TestKubeProxyRender(t *testing.T) {
	daemonset := testConfig()
	daemonset.Networking.KubeProxy = config.KubeProxyDaemonSet
	for path := range renderMap(t, daemonset, Options{}) {
		if strings.Contains(path, "kube-proxy") {
			t.Errorf("daemonset: the agent renders %s", path)
		}
	}
	for _, tc := range []struct{ cfgMode, hostMode, want string }{
		{"", "", "iptables"},
		{"", "nftables", "nftables"},
		{"iptables", "nftables", "iptables"},
		{"nftables", "", "nftables"},
	} {
		c := kubeProxyConfig()
		c.Networking.KubeProxyMode = tc.cfgMode
		m := renderMap(t, c, Options{KubeProxyMode: tc.hostMode})
		f, ok := m[KubeProxyConfigFile]
		if !ok {
			t.Fatalf("%+v: no %s", tc, KubeProxyConfigFile)
		}
		var kp kubeproxyv1alpha1.KubeProxyConfiguration
		if err := yaml.UnmarshalStrict(f.Data, &kp); err != nil {
			t.Fatalf("%s: %v", KubeProxyConfigFile, err)
		}
		if string(kp.Mode) != tc.want || kp.ClientConnection.Kubeconfig != KubeletKubeconf || kp.HostnameOverride != c.Agent.NodeName ||
			kp.DetectLocalMode != "BridgeInterface" || kp.DetectLocal.BridgeInterface != BridgeName ||
			kp.IPTables.LocalhostNodePorts == nil || *kp.IPTables.LocalhostNodePorts || *kp.Conntrack.MaxPerCore != 0 || *kp.Conntrack.Min != 0 {
			t.Errorf("%+v: %+v", tc, kp)
		}
		if l := m[wantsDir+"/"+KubeProxyUnitName]; l.Link != KubeProxyUnitFile {
			t.Errorf("%+v: kube-proxy is not enabled: %+v", tc, l)
		}
		if u := string(m[KubeProxyUnitFile].Data); !strings.Contains(u, KubeProxyBinary+" \\\n\t--config="+KubeProxyConfigFile) {
			t.Errorf("unit:\n%s", u)
		}
	}
}

// A node that goes from the agent's kube-proxy to the DaemonSet keeps no
// file of it; drift repair restarts kube-proxy for its files and keeps it
// running only where start wrote its unit.
func TestKubeProxyWriteAndRepair(t *testing.T) {
	root := t.TempDir()
	if _, _, err := Write(root, kubeProxyConfig(), Options{}); err != nil {
		t.Fatal(err)
	}
	files, err := Render(kubeProxyConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sums := Checksums(files)
	for _, p := range kubeProxyFiles {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if u, _ := UnitOf(p); u != KubeProxyUnitName {
			t.Errorf("UnitOf(%s) = %q", p, u)
		}
		if _, ok := sums[p]; !ok {
			t.Errorf("%s is not recorded for drift repair", p)
		}
	}
	if !slices.Contains(KeptUnits(sums), KubeProxyUnitName) {
		t.Errorf("kept units %v", KeptUnits(sums))
	}
	if err := os.Remove(filepath.Join(root, KubeProxyConfigFile)); err != nil {
		t.Fatal(err)
	}
	if d, err := FindDrift(root, sums); err != nil || len(d) != 1 || d[0].Path != KubeProxyConfigFile || d[0].How != "deleted" {
		t.Fatalf("drift %+v, %v", d, err)
	}

	changed, _, err := Write(root, testConfig(), Options{})
	if err != nil || !changed {
		t.Fatalf("write daemonset: changed %v, %v", changed, err)
	}
	for _, p := range kubeProxyFiles {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	files, _ = Render(testConfig(), Options{})
	if slices.Contains(KeptUnits(Checksums(files)), KubeProxyUnitName) {
		t.Errorf("kube-proxy kept without its unit")
	}
}

func TestDetectKubeProxyMode(t *testing.T) {
	defer func(f func(string) (string, error)) { lookPath = f }(lookPath)
	for _, tc := range []struct {
		have []string
		want string
	}{
		{[]string{"iptables", "nft"}, "iptables"},
		{[]string{"iptables"}, "iptables"},
		{[]string{"nft"}, "nftables"},
		{nil, "iptables"},
	} {
		lookPath = func(name string) (string, error) {
			if slices.Contains(tc.have, name) {
				return "/usr/sbin/" + name, nil
			}
			return "", errors.New("not found")
		}
		if got := DetectKubeProxyMode(); got != tc.want {
			t.Errorf("host with %v: %s, want %s", tc.have, got, tc.want)
		}
	}
	if _, err := Render(kubeProxyConfig(), Options{KubeProxyMode: "ipvs"}); err == nil {
		t.Error("mode ipvs rendered")
	}
}

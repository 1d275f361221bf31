package network

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/netns"
)

// Issue 26 items 8 and 13d against the kernel: in a network namespace of
// its own, the host has podman's nft chain and an iptables-legacy chain
// before start; the node then adds its chains (nft and legacy), podman
// its next container's chains (their jumps commented as CNI plugins
// comment them), the
// tables its iptables makes, a cni_ table, and an admin adds a table
// whose forward chain drops. Reset's RemoveNetfilter removes exactly the
// node's part, and a second run changes nothing.
func TestResetNetfilterInANetworkNamespace(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	for _, cmd := range []string{"nft", "iptables-legacy", "iptables-legacy-save"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("needs %s in PATH (Debian packages nftables and iptables; make deps installs them)", cmd)
		}
	}
	nft(t, `table ip nat {
	chain POSTROUTING { type nat hook postrouting priority 100; policy accept; }
	chain CNI-podman1 { }
}
add rule ip nat POSTROUTING ip saddr 10.88.0.0/16 jump CNI-podman1
`)
	sh(t, "iptables-legacy", "-t", "nat", "-N", "CNI-podman-legacy")
	sh(t, "iptables-legacy", "-t", "nat", "-A", "POSTROUTING", "-s", "10.88.0.0/16", "-m", "comment", "--comment", `name: "podman" id: "x -j y"`, "-j", "CNI-podman-legacy")
	ctx := context.Background()
	c := Cleaner{}
	before, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before start: %+v", before)
	// The node: its CNI chain in the host's nat, an iptables-made table,
	// a plugin's table; its legacy kube-proxy chain; then an admin's table.
	nft(t, `add chain ip nat CNI-node1
add rule ip nat POSTROUTING ip saddr 10.244.0.0/24 jump CNI-node1
table ip mangle {
	chain PREROUTING { type filter hook prerouting priority -150; policy accept; }
}
table ip cni_plugins_masquerade {
	chain postrouting { type nat hook postrouting priority 100; policy accept; }
}
table inet guard {
	chain forward { type filter hook forward priority 0; policy drop; }
}
`)
	// podman's next container after start: its chain's jump carries the
	// CNI plugins' comment naming its network (JSON input: the comment
	// holds quotes).
	nft(t, "add chain ip nat CNI-podman2\n")
	nftJSON(t, `{"nftables": [{"add": {"rule": {"family": "ip", "table": "nat", "chain": "POSTROUTING",
		"comment": "name: \"podman\" id: \"c2\"", "expr": [{"jump": {"target": "CNI-podman2"}}]}}}]}`)
	sh(t, "iptables-legacy", "-t", "nat", "-N", "CNI-podman-legacy2")
	sh(t, "iptables-legacy", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", `name: "podman" id: "c2"`, "-j", "CNI-podman-legacy2")
	sh(t, "iptables-legacy", "-t", "nat", "-N", "KUBE-SERVICES")
	sh(t, "iptables-legacy", "-t", "nat", "-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
	sh(t, "iptables-legacy", "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/24", "-j", "KUBE-SERVICES")
	changed, err := c.RemoveNetfilter(ctx, before, true)
	if err != nil || !changed {
		t.Fatalf("RemoveNetfilter = %v, %v", changed, err)
	}
	rules := sh(t, "nft", "list", "ruleset")
	for _, want := range []string{"CNI-podman1", "ip saddr 10.88.0.0/16 jump CNI-podman1", "chain CNI-podman2", "jump CNI-podman2", "table inet guard", "policy drop"} {
		if !strings.Contains(rules, want) {
			t.Errorf("nft: %q removed:\n%s", want, rules)
		}
	}
	for _, gone := range []string{"CNI-node1", "table ip mangle", "cni_plugins_masquerade"} {
		if strings.Contains(rules, gone) {
			t.Errorf("nft: the node's %q left:\n%s", gone, rules)
		}
	}
	legacy := sh(t, "iptables-legacy-save", "-t", "nat")
	if !strings.Contains(legacy, ":CNI-podman-legacy ") || !strings.Contains(legacy, "-j CNI-podman-legacy\n") ||
		!strings.Contains(legacy, ":CNI-podman-legacy2 ") || !strings.Contains(legacy, "-j CNI-podman-legacy2\n") {
		t.Errorf("iptables-legacy: podman's chain or rule removed:\n%s", legacy)
	}
	if strings.Contains(legacy, "KUBE-SERVICES") {
		t.Errorf("iptables-legacy: the node's chain or rules left:\n%s", legacy)
	}
	if changed, err := c.RemoveNetfilter(ctx, before, true); err != nil || changed {
		t.Errorf("a second run = %v, %v", changed, err)
	}
}

func nft(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v\n%s\n%s", err, out, script)
	}
}

func nftJSON(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("nft", "-j", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -j -f: %v\n%s\n%s", err, out, script)
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

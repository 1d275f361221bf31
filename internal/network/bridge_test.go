package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fakeNet is a host namespace as ip and nft show it: links and an nft
// ruleset of tables, chains and rules.
type fakeNet struct {
	links  []map[string]string
	tables []string // "family name"
	chains []fakeChain
	rules  []fakeRule
	calls  []string
	// policies are base chains' policies ("family table chain"), accept
	// when not named.
	policies map[string]string
	// comments are rules' comments, by handle.
	comments map[int]string
}

type fakeChain struct{ family, table, name, hook string }

type fakeRule struct {
	family, table, chain string
	handle               int
	jump                 string
}

func (f *fakeNet) run(_ context.Context, name string, args ...string) ([]byte, error) {
	a := strings.Join(args, " ")
	f.calls = append(f.calls, name+" "+a)
	switch {
	case name == "ip" && a == "-j link show":
		return json.Marshal(f.links)
	case name == "ip" && strings.HasPrefix(a, "link del "):
		for i, l := range f.links {
			if l["ifname"] == args[2] {
				f.links = slices.Delete(f.links, i, i+1)
				return nil, nil
			}
		}
		return nil, errors.New("Cannot find device")
	case name == "nft" && a == "-j list ruleset":
		return f.ruleset(), nil
	case name == "nft":
		return nil, f.apply(args)
	}
	return nil, errors.New("unexpected: " + name + " " + a)
}

func (f *fakeNet) ruleset() []byte {
	var objs []map[string]any
	objs = append(objs, map[string]any{"metainfo": map[string]any{"version": "1.0.6"}})
	for _, t := range f.tables {
		fam, n, _ := strings.Cut(t, " ")
		objs = append(objs, map[string]any{"table": map[string]any{"family": fam, "name": n, "handle": 1}})
	}
	for _, c := range f.chains {
		ch := map[string]any{"family": c.family, "table": c.table, "name": c.name, "handle": 2}
		if c.hook != "" {
			policy := f.policies[c.family+" "+c.table+" "+c.name]
			if policy == "" {
				policy = "accept"
			}
			ch["hook"], ch["type"], ch["prio"], ch["policy"] = c.hook, "nat", 100, policy
		}
		objs = append(objs, map[string]any{"chain": ch})
	}
	for _, r := range f.rules {
		expr := []any{map[string]any{"counter": map[string]any{"packets": 0, "bytes": 0}}}
		if r.jump != "" {
			expr = append(expr, map[string]any{"jump": map[string]any{"target": r.jump}})
		} else {
			expr = append(expr, map[string]any{"accept": nil})
		}
		rule := map[string]any{"family": r.family, "table": r.table, "chain": r.chain, "handle": r.handle, "expr": expr}
		if c := f.comments[r.handle]; c != "" {
			rule["comment"] = c
		}
		objs = append(objs, map[string]any{"rule": rule})
	}
	b, _ := json.Marshal(map[string]any{"nftables": objs})
	return b
}

func (f *fakeNet) apply(a []string) error {
	switch strings.Join(a[:2], " ") {
	case "delete rule":
		for i, r := range f.rules {
			if r.family == a[2] && r.table == a[3] && r.chain == a[4] && fmt.Sprint(r.handle) == a[6] {
				f.rules = slices.Delete(f.rules, i, i+1)
				return nil
			}
		}
	case "flush chain":
		f.rules = slices.DeleteFunc(f.rules, func(r fakeRule) bool { return r.family == a[2] && r.table == a[3] && r.chain == a[4] })
		return nil
	case "delete chain":
		for _, r := range f.rules {
			if r.jump == a[4] || (r.chain == a[4] && r.table == a[3]) {
				return errors.New("Device or resource busy")
			}
		}
		n := len(f.chains)
		f.chains = slices.DeleteFunc(f.chains, func(c fakeChain) bool { return c.family == a[2] && c.table == a[3] && c.name == a[4] })
		if len(f.chains) < n {
			return nil
		}
	case "delete table":
		t := a[2] + " " + a[3]
		if i := slices.Index(f.tables, t); i >= 0 {
			f.tables = slices.Delete(f.tables, i, i+1)
			f.chains = slices.DeleteFunc(f.chains, func(c fakeChain) bool { return c.family+" "+c.table == t })
			f.rules = slices.DeleteFunc(f.rules, func(r fakeRule) bool { return r.family+" "+r.table == t })
			return nil
		}
	}
	return errors.New("No such file or directory: " + strings.Join(a, " "))
}

// joinedHost is a host after a join: its own filter table with a rule
// of its own; the node's nat table with the bridge plugin's and
// portmap's chains; the kubelet's canary in mangle; kube-proxy's chains
// (iptables mode) and tables (nftables mode); a cni_ table; the agent's
// masquerade table, with its rule.
func joinedHost() *fakeNet {
	return &fakeNet{
		links: []map[string]string{{"ifname": "lo"}, {"ifname": "eth0"}, {"ifname": "cni0"},
			{"ifname": "veth1234", "master": "cni0"}, {"ifname": "vethother", "master": "br-site"}, {"ifname": "br-site"}},
		tables: []string{"inet site", "ip nat", "ip mangle", "ip cni_plugins_masquerade", "ip " + MasqTable, "ip kube-proxy", "ip6 kube-proxy"},
		chains: []fakeChain{
			{"inet", "site", "input", "input"},
			{"ip", "nat", "POSTROUTING", "postrouting"}, {"ip", "nat", "PREROUTING", "prerouting"},
			{"ip", "nat", "CNI-abc", ""}, {"ip", "nat", "CNI-HOSTPORT-DNAT", ""}, {"ip", "nat", "CNI-DN-1", ""},
			{"ip", "mangle", "KUBE-KUBELET-CANARY", ""}, {"ip", "nat", "KUBE-SERVICES", ""}, {"ip", "nat", "KUBE-SVC-X", ""},
			{"ip", "kube-proxy", "nat-output", "output"}, {"ip6", "kube-proxy", "services", ""},
			{"ip", "cni_plugins_masquerade", "postrouting", "postrouting"},
			{"ip", MasqTable, "postrouting", "postrouting"},
		},
		rules: []fakeRule{
			{"inet", "site", "input", 3, ""},
			{"ip", "nat", "POSTROUTING", 10, "CNI-abc"}, {"ip", "nat", "PREROUTING", 11, "CNI-HOSTPORT-DNAT"},
			{"ip", "nat", "POSTROUTING", 12, ""},
			{"ip", "nat", "CNI-HOSTPORT-DNAT", 13, "CNI-DN-1"}, {"ip", "nat", "CNI-abc", 14, ""},
			{"ip", "nat", "PREROUTING", 15, "KUBE-SERVICES"}, {"ip", "nat", "KUBE-SERVICES", 16, "KUBE-SVC-X"},
			{"ip", "kube-proxy", "nat-output", 17, "services"},
			{"ip", MasqTable, "postrouting", 20, ""},
		},
	}
}

func TestCleanerRemovesTheNodesNetworkOnly(t *testing.T) {
	f := joinedHost()
	c := Cleaner{Routes: Routes{Run: f.run}, HasNft: func() bool { return true }, HasCmd: noCmd}
	ctx := context.Background()
	changed, err := c.RemoveBridge(ctx)
	if err != nil || !changed {
		t.Fatalf("bridge: %v %v", changed, err)
	}
	var names []string
	for _, l := range f.links {
		names = append(names, l["ifname"])
	}
	if strings.Join(names, ",") != "lo,eth0,vethother,br-site" {
		t.Fatalf("links left: %v", names)
	}
	// nat existed before start (a rule of the host's own is in it); mangle did not.
	changed, err = c.RemoveNetfilter(ctx, Before{Tables: []string{"inet site", "ip nat"}}, true)
	if err != nil || !changed {
		t.Fatalf("netfilter: %v %v\n%s", changed, err, strings.Join(f.calls, "\n"))
	}
	if strings.Join(f.tables, ",") != "inet site,ip nat" {
		t.Errorf("tables left: %v", f.tables)
	}
	if len(f.rules) != 2 || f.rules[0].handle != 3 || f.rules[1].handle != 12 {
		t.Errorf("rules left: %+v", f.rules)
	}
	if len(f.chains) != 3 {
		t.Errorf("chains left: %+v", f.chains)
	}
	// Twice is safe and changes nothing.
	if changed, err := c.RemoveBridge(ctx); err != nil || changed {
		t.Errorf("bridge again: %v %v", changed, err)
	}
	if changed, err := c.RemoveNetfilter(ctx, Before{Tables: []string{"inet site", "ip nat"}}, true); err != nil || changed {
		t.Errorf("netfilter again: %v %v", changed, err)
	}
}

// Without start's record no table is judged new: only the node's chains
// and the plugins' own tables go.
func TestCleanerWithoutARecordKeepsTables(t *testing.T) {
	f := joinedHost()
	c := Cleaner{Routes: Routes{Run: f.run}, HasNft: func() bool { return true }, HasCmd: noCmd}
	if _, err := c.RemoveNetfilter(context.Background(), Before{}, false); err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.tables, ",") != "inet site,ip nat,ip mangle" {
		t.Errorf("tables left: %v", f.tables)
	}
	tables, err := c.Tables(context.Background())
	if err != nil || strings.Join(tables, ",") != "inet site,ip mangle,ip nat" {
		t.Errorf("Tables: %v %v", tables, err)
	}
	// Without nft there is nothing to read or remove.
	none := Cleaner{Routes: Routes{Run: f.run}, HasNft: func() bool { return false }, HasCmd: noCmd}
	if tables, err := none.Tables(context.Background()); err != nil || len(tables) != 0 {
		t.Errorf("no nft: %v %v", tables, err)
	}
}

// noCmd: the host has no iptables-legacy tools.
func noCmd(string) bool { return false }

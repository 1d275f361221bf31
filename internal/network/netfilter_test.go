package network

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Issue 26 item 8: reset removes only the netfilter state the node made.
// podman's and nerdctl's CNI-* chains (and the rules that jump to them)
// were on the host before the first start and stay; the node's own
// CNI-* chain in the same table goes. A table an admin added after start
// that holds only base chains, one of them a forward chain with policy
// drop, stays; the empty table the node's iptables made goes.
func TestResetRemovesOnlyTheNetfilterStateTheNodeMade(t *testing.T) {
	f := joinedHost()
	// Before start: podman's bridge masquerade and nerdctl's portmap chain.
	f.chains = append(f.chains, fakeChain{"ip", "nat", "CNI-podman1", ""}, fakeChain{"ip", "nat", "CNI-DN-nerdctl1", ""})
	f.rules = append(f.rules, fakeRule{"ip", "nat", "POSTROUTING", 30, "CNI-podman1"}, fakeRule{"ip", "nat", "CNI-podman1", 31, ""},
		fakeRule{"ip", "nat", "CNI-HOSTPORT-DNAT", 32, "CNI-DN-nerdctl1"})
	before := Before{Tables: []string{"inet site", "ip nat"},
		Chains:      []string{"inet site input", "ip nat CNI-DN-nerdctl1", "ip nat CNI-HOSTPORT-DNAT", "ip nat CNI-podman1", "ip nat POSTROUTING", "ip nat PREROUTING"},
		ChainsKnown: true}
	// After start: podman's next container, its chain's jump commented
	// with its own CNI network, as the CNI plugins comment theirs.
	f.chains = append(f.chains, fakeChain{"ip", "nat", "CNI-podman2", ""})
	f.rules = append(f.rules, fakeRule{"ip", "nat", "POSTROUTING", 33, "CNI-podman2"})
	f.comments = map[int]string{33: `name: "podman" id: "c2"`, 13: `dnat name: "aks-flex-node" id: "n1"`}
	// After start: an admin's table of base chains only, forward drop.
	f.tables = append(f.tables, "inet guard")
	f.chains = append(f.chains, fakeChain{"inet", "guard", "forward", "forward"}, fakeChain{"inet", "guard", "input", "input"})
	f.policies = map[string]string{"inet guard forward": "drop"}
	c := Cleaner{Routes: Routes{Run: f.run}, HasNft: func() bool { return true }, HasCmd: func(string) bool { return false }}
	if _, err := c.RemoveNetfilter(context.Background(), before, true); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(f.calls, "\n"))
	}
	if got := strings.Join(f.tables, ","); got != "inet site,ip nat,inet guard" {
		t.Errorf("tables left: %s", got)
	}
	var chains []string
	for _, ch := range f.chains {
		chains = append(chains, ch.family+" "+ch.table+" "+ch.name)
	}
	for _, want := range []string{"ip nat CNI-podman1", "ip nat CNI-podman2", "ip nat CNI-DN-nerdctl1", "ip nat CNI-HOSTPORT-DNAT", "inet guard forward"} {
		if !slices.Contains(chains, want) {
			t.Errorf("chain %s removed; left: %v", want, chains)
		}
	}
	for _, gone := range []string{"ip nat CNI-abc", "ip nat CNI-DN-1", "ip nat KUBE-SERVICES"} {
		if slices.Contains(chains, gone) {
			t.Errorf("the node's chain %s left", gone)
		}
	}
	var handles []int
	for _, r := range f.rules {
		handles = append(handles, r.handle)
	}
	// The host's own rules, the jump to the shared CNI-HOSTPORT-DNAT that
	// was there before, podman's jumps and chain rule, nerdctl's jump.
	if !slices.Equal(handles, []int{3, 11, 12, 30, 31, 32, 33}) {
		t.Errorf("rules left: %v\n%s", handles, strings.Join(f.calls, "\n"))
	}
}

package network

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ma(s string) netip.Addr   { return netip.MustParseAddr(s) }

// labHost is a host on 192.168.50.0/24 with this node's bridge, a route
// of its own into 10.250.0.0/16, and the pod routes already applied.
func labHost() HostNet {
	return HostNet{
		Addrs: []Addr{{Dev: "eth0", Prefix: mp("192.168.50.10/24")}, {Dev: "lo", Prefix: mp("127.0.0.1/8")},
			{Dev: BridgeName, Prefix: mp("10.244.0.1/24")}, {Dev: "lo", Prefix: mp("10.244.99.7/32")}},
		Routes: []Route{{Dst: mp("0.0.0.0/0"), Gateway: ma("192.168.50.1"), Dev: "eth0"},
			{Dst: mp("10.244.7.0/24"), Gateway: ma("192.168.50.17"), Metric: PodRouteMetric},
			{Dst: mp("10.244.128.0/17"), Gateway: ma("192.168.50.1"), Dev: "eth0"}},
	}
}

var labNet = PodNet{Cluster: mp("10.244.0.0/16"), Own: mp("10.244.0.0/24")}

// Only peers reachable as a next hop on this host's subnets, with an
// IPv4 pod CIDR that is not this node's, get a route; the others are
// named with the reason.
func TestPodRoutes(t *testing.T) {
	peers := []Peer{
		{Name: "b", PodCIDR: mp("10.244.2.0/24"), InternalIP: ma("192.168.50.12")},
		{Name: "a", PodCIDR: mp("10.244.1.0/24"), InternalIP: ma("192.168.50.11")},
		{Name: "again", PodCIDR: mp("10.244.7.0/24"), InternalIP: ma("192.168.50.17")},
		{Name: "pending", InternalIP: ma("192.168.50.13")},
		{Name: "far", PodCIDR: mp("10.244.3.0/24"), InternalIP: ma("10.9.9.9")},
		{Name: "v6", PodCIDR: mp("fd00::/64"), InternalIP: ma("192.168.50.14")},
		{Name: "noip", PodCIDR: mp("10.244.4.0/24")},
		{Name: "same", PodCIDR: mp("10.244.0.0/24"), InternalIP: ma("192.168.50.15")},
		{Name: "loopback", PodCIDR: mp("10.244.5.0/24"), InternalIP: ma("127.0.0.2")},
	}
	plan := PodRoutes(labNet, peers, labHost())
	want := []Route{
		{Dst: mp("10.244.1.0/24"), Gateway: ma("192.168.50.11"), Metric: PodRouteMetric},
		{Dst: mp("10.244.2.0/24"), Gateway: ma("192.168.50.12"), Metric: PodRouteMetric},
		{Dst: mp("10.244.7.0/24"), Gateway: ma("192.168.50.17"), Metric: PodRouteMetric},
	}
	if !reflect.DeepEqual(plan.Routes, want) {
		t.Fatalf("routes %v, want %v", plan.Routes, want)
	}
	if got := plan.Spared(); !reflect.DeepEqual(got, []netip.Prefix{mp("10.244.1.0/24"), mp("10.244.2.0/24"), mp("10.244.7.0/24")}) {
		t.Fatalf("spared %v", got)
	}
	if !reflect.DeepEqual(plan.Skipped, []string{"noip: no IPv4 InternalIP", "pending: no IPv4 pod CIDR", "v6: no IPv4 pod CIDR"}) {
		t.Errorf("skipped %q", plan.Skipped)
	}
	got := fmt.Sprint(plan.Refused)
	for _, s := range []string{"far: InternalIP 10.9.9.9 is on no directly connected subnet", "same: pod CIDR 10.244.0.0/24 overlaps this node's",
		"loopback: InternalIP 127.0.0.2 overlaps loopback"} {
		if !strings.Contains(got, s) {
			t.Errorf("refused does not say %q:\n%s", s, got)
		}
	}
}

// TestPodRoutesRefuseHostileNodes is issue 26's item 2: a Node object is
// cluster data. The pod CIDRs that routed half of IPv4 and the metadata
// endpoint through a peer, one outside the cluster's pod range or of
// another size, one over the host's own addresses or routes, and an
// InternalIP off the host's subnets (or the host's own, or a pod's) are
// each refused, named, and neither routed nor spared from the masquerade.
func TestPodRoutesRefuseHostileNodes(t *testing.T) {
	ok := Peer{Name: "good", PodCIDR: mp("10.244.1.0/24"), InternalIP: ma("192.168.50.11")}
	hostile := []struct {
		peer Peer
		why  string
	}{
		{Peer{Name: "half", PodCIDR: mp("128.0.0.0/1"), InternalIP: ma("192.168.50.66")}, "overlaps link-local"},
		{Peer{Name: "half-no-ip-yet", PodCIDR: mp("128.0.0.0/1")}, "overlaps link-local"},
		{Peer{Name: "lower-half", PodCIDR: mp("0.0.0.0/1"), InternalIP: ma("192.168.50.66")}, `overlaps "this network"`},
		{Peer{Name: "metadata", PodCIDR: mp("169.254.169.254/32"), InternalIP: ma("192.168.50.66")}, "overlaps link-local"},
		{Peer{Name: "multicast", PodCIDR: mp("239.1.0.0/24"), InternalIP: ma("192.168.50.66")}, "overlaps multicast"},
		{Peer{Name: "outside", PodCIDR: mp("10.9.0.0/24"), InternalIP: ma("192.168.50.66")}, "not inside networking.clusterPodCIDR 10.244.0.0/16"},
		{Peer{Name: "wide", PodCIDR: mp("10.244.64.0/18"), InternalIP: ma("192.168.50.66")}, "not a /24, the per-node size"},
		{Peer{Name: "narrow", PodCIDR: mp("10.244.3.128/25"), InternalIP: ma("192.168.50.66")}, "not a /24"},
		{Peer{Name: "whole", PodCIDR: mp("10.244.0.0/16"), InternalIP: ma("192.168.50.66")}, "not a /24"},
		{Peer{Name: "on-lo", PodCIDR: mp("10.244.99.0/24"), InternalIP: ma("192.168.50.66")}, "overlaps the host's address 10.244.99.7/32 on lo"},
		{Peer{Name: "on-route", PodCIDR: mp("10.244.200.0/24"), InternalIP: ma("192.168.50.66")}, "overlaps the host's route 10.244.128.0/17"},
		{Peer{Name: "host-bits", PodCIDR: netip.PrefixFrom(ma("10.244.5.1"), 24), InternalIP: ma("192.168.50.66")}, "host bits"},
		{Peer{Name: "off-subnet", PodCIDR: mp("10.244.6.0/24"), InternalIP: ma("203.0.113.9")}, "on no directly connected subnet"},
		{Peer{Name: "self-ip", PodCIDR: mp("10.244.8.0/24"), InternalIP: ma("192.168.50.10")}, "this host's own address"},
		{Peer{Name: "pod-ip", PodCIDR: mp("10.244.9.0/24"), InternalIP: ma("10.244.0.5")}, "in the pod range"},
		{Peer{Name: "broadcast", PodCIDR: mp("10.244.10.0/24"), InternalIP: ma("192.168.50.255")}, "network or broadcast address"},
		{Peer{Name: "metadata-hop", PodCIDR: mp("10.244.11.0/24"), InternalIP: ma("169.254.169.254")}, "overlaps link-local"},
		{Peer{Name: "thief", PodCIDR: mp("10.244.1.0/24"), InternalIP: ma("192.168.50.66")}, "claimed by Node [good]"},
	}
	peers := []Peer{ok}
	for _, h := range hostile {
		peers = append(peers, h.peer)
	}
	plan := PodRoutes(labNet, peers, labHost())
	if len(plan.Routes) != 0 {
		t.Errorf("routes %v: a hostile Node got one, or the range it stole stayed with its owner", plan.Routes)
	}
	why := map[string]string{}
	for _, r := range plan.Refused {
		why[r.Node] = r.Reason
	}
	for _, h := range hostile {
		if !strings.Contains(why[h.peer.Name], h.why) {
			t.Errorf("%s (%s via %s): refused %q, want it to say %q", h.peer.Name, h.peer.PodCIDR, h.peer.InternalIP, why[h.peer.Name], h.why)
		}
	}
	rules := MasqueradeRules(labNet.Own, plan.Spared())
	if !strings.Contains(rules, "ip daddr != { 10.244.0.0/24, 224.0.0.0/4 } masquerade") {
		t.Errorf("the masquerade spares a refused Node's pod CIDR:\n%s", rules)
	}
	// Without networking.clusterPodCIDR no Node's pod CIDR is routed.
	plan = PodRoutes(PodNet{Own: labNet.Own}, []Peer{ok}, labHost())
	if len(plan.Routes) != 0 || len(plan.Refused) != 1 || !strings.Contains(plan.Refused[0].Reason, "networking.clusterPodCIDR is not set") {
		t.Errorf("no cluster range: %+v", plan)
	}
	// This node's own pod CIDR, when it comes from its Node, is held to
	// the same rule.
	for own, want := range map[string]string{"128.0.0.0/1": "overlaps", "10.9.0.0/24": "not inside", "10.244.3.0/24": ""} {
		if got := (PodNet{Cluster: labNet.Cluster, Own: mp(own)}).CheckOwn(); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("own %s: %q, want %q", own, got, want)
		}
	}
}

// The static routes and the pod routes share the protocol; each apply
// changes only its own set, and reset's RemoveAll removes both.
func TestPodRoutesAndStaticRoutesApart(t *testing.T) {
	f := &fakeIP{routes: []fakeRoute{{r: Route{Dst: mp("10.40.0.0/16"), Dev: "eth9"}, proto: "boot"}}}
	rs := Routes{Run: f.run}
	ctx := context.Background()
	static := []Route{{Dst: mp("10.30.0.0/16"), Gateway: ma("192.168.10.1"), Metric: 100}}
	pods := []Route{{Dst: mp("10.244.1.0/24"), Gateway: ma("192.168.50.11"), Metric: PodRouteMetric}}
	if _, err := rs.Apply(ctx, static); err != nil {
		t.Fatal(err)
	}
	if ch, err := rs.ApplyPodRoutes(ctx, pods); err != nil || !ch {
		t.Fatalf("pod routes: changed %v, %v", ch, err)
	}
	if ch, err := rs.Apply(ctx, static); err != nil || ch {
		t.Fatalf("static apply touched the pod routes: changed %v, %v (%v)", ch, err, f.routes)
	}
	if ch, err := rs.ApplyPodRoutes(ctx, nil); err != nil || !ch {
		t.Fatalf("pod routes emptied: changed %v, %v", ch, err)
	}
	owned, _ := rs.Owned(ctx)
	if len(owned) != 1 || owned[0].Dst != mp("10.30.0.0/16") {
		t.Fatalf("the pod apply removed a static route or kept its own: %v", owned)
	}
	if _, err := rs.ApplyPodRoutes(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ApplyPodRoutes(ctx, static); err == nil {
		t.Fatal("a static route applied as a pod route")
	}
	if ch, err := rs.RemoveAll(ctx); err != nil || !ch {
		t.Fatalf("remove all: %v %v", ch, err)
	}
	if len(f.routes) != 1 || f.routes[0].proto != "boot" {
		t.Fatalf("left after RemoveAll: %v", f.routes)
	}
}

// The masquerade spares the pod networks (own included, nested ones
// collapsed, IPv6 left out) and multicast, and only this node's pods are
// masqueraded.
func TestMasqueradeRules(t *testing.T) {
	got := MasqueradeRules(mp("10.244.1.0/24"), []Prefix{mp("10.244.0.0/24"), mp("10.244.0.0/16"), mp("10.244.7.0/24"), mp("fd00::/64")})
	for _, s := range []string{
		"table ip aks_flex_node\ndelete table ip aks_flex_node\ntable ip aks_flex_node {",
		"type nat hook postrouting priority 100; policy accept;",
		"ip saddr 10.244.1.0/24 ip daddr != { 10.244.0.0/16, 224.0.0.0/4 } masquerade",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("rules lack %q:\n%s", s, got)
		}
	}
	got = MasqueradeRules(mp("10.244.1.0/24"), []Prefix{mp("10.244.2.0/24")})
	if !strings.Contains(got, "ip daddr != { 10.244.1.0/24, 10.244.2.0/24, 224.0.0.0/4 }") {
		t.Errorf("rules:\n%s", got)
	}
	if !ownedTable(MasqTable) {
		t.Error("reset would leave the masquerade table")
	}
}

// Prefix is netip.Prefix, short for the tables above.
type Prefix = netip.Prefix

// The sweep names the same clashes as comparing every pair, for ranges
// of every size, nested, equal, adjacent and apart.
func TestOverlappingMatchesEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	for round := range 300 {
		var cand []Peer
		for i := range 1 + rng.IntN(40) {
			a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(8)), byte(rng.IntN(256))})
			bits := []int{0, 8, 14, 16, 22, 24, 24, 24, 26, 32}[rng.IntN(10)]
			cand = append(cand, Peer{Name: fmt.Sprintf("n%d", i), PodCIDR: netip.PrefixFrom(a, bits).Masked()})
		}
		got := overlapping(cand)
		for i, p := range cand {
			var want []string
			for j, o := range cand {
				if i != j && o.PodCIDR.Overlaps(p.PodCIDR) {
					want = append(want, o.Name)
				}
			}
			g := slices.Clone(got[i])
			slices.Sort(g)
			slices.Sort(want)
			if !slices.Equal(g, want) {
				t.Fatalf("round %d: %s (%s) clashes with %v, want %v", round, p.Name, p.PodCIDR, g, want)
			}
		}
	}
}

// BenchmarkPodRoutes is one plan of the routes to N peers, each with its
// own /24 on one subnet: what keep-pod-routes does on every node each
// time a Node's route changes.
func BenchmarkPodRoutes(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pn := PodNet{Cluster: mp("10.128.0.0/10"), Own: mp("10.128.0.0/24")}
			h := HostNet{Addrs: []Addr{{Dev: "eth0", Prefix: mp("10.1.200.1/16")}},
				Routes: []Route{{Dst: mp("0.0.0.0/0"), Gateway: ma("10.1.255.254"), Dev: "eth0"}}}
			var peers []Peer
			for i := 1; i <= n; i++ {
				peers = append(peers, Peer{Name: fmt.Sprintf("n%d", i),
					PodCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i>>8), byte(i), 0}), 24),
					InternalIP: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})})
			}
			for b.Loop() {
				if plan := PodRoutes(pn, peers, h); len(plan.Routes) != n {
					b.Fatalf("%d routes of %d peers (refused %v)", len(plan.Routes), n, plan.Refused[:min(3, len(plan.Refused))])
				}
			}
		})
	}
}

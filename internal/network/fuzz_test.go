package network

import (
	"net/netip"
	"strings"
	"testing"
)

// specialAddrs are addresses no accepted pod CIDR or next hop may hold,
// listed here apart from config.ReservedRange so the fuzzer checks the
// rule against what it is meant to keep out, not against itself.
var specialAddrs = []string{"0.0.0.0", "0.255.255.255", "127.0.0.1", "127.255.255.254", "169.254.169.254", "169.254.0.1",
	"224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1", "::", "::1", "fe80::1", "ff02::1", "::ffff:169.254.169.254"}

// FuzzPodCIDRAcceptance feeds a Node's pod CIDR and InternalIP, as the
// Node object spells them, to the planner next to a good peer, and checks
// what is accepted against the rules stated outside the code: inside the
// cluster's pod range, of the per-node size, apart from this node's pod
// CIDR, the host's addresses and routes and every special address; the
// next hop on a directly connected subnet and none of the host's own; the
// masquerade spares the accepted routes only; a refusal is named.
func FuzzPodCIDRAcceptance(f *testing.F) {
	for _, s := range [][2]string{
		{"10.244.1.0/24", "192.168.50.11"}, {"128.0.0.0/1", "192.168.50.66"}, {"169.254.169.254/32", "192.168.50.66"},
		{"0.0.0.0/0", "192.168.50.66"}, {"10.244.3.0/24", "203.0.113.9"}, {"10.244.200.0/24", "192.168.50.12"},
		{"10.244.99.0/24", "192.168.50.12"}, {"fe80::/10", "192.168.50.12"}, {"10.244.4.0/24", "10.244.0.9"},
		{"10.244.5.0/24", "192.168.50.0"}, {"::ffff:10.244.6.0/120", "::ffff:192.168.50.12"}, {"10.244.1.0/24", "192.168.50.12"},
	} {
		f.Add(s[0], s[1])
	}
	h := labHost()
	good := Peer{Name: "good", PodCIDR: mp("10.244.1.0/24"), InternalIP: ma("192.168.50.11")}
	f.Fuzz(func(t *testing.T, cidr, ip string) {
		c, err := netip.ParsePrefix(cidr)
		if err != nil {
			return
		}
		a, _ := netip.ParseAddr(ip)
		peer := Peer{Name: "fuzzed", PodCIDR: c, InternalIP: a}
		plan := PodRoutes(labNet, []Peer{good, peer}, h)
		for _, r := range plan.Refused {
			if r.Reason == "" || r.Node == "" {
				t.Fatalf("refused %+v: unnamed", r)
			}
		}
		for _, r := range plan.Routes {
			checkAccepted(t, r, h)
		}
		if len(plan.Routes)+len(plan.Refused)+len(plan.Skipped) != 2 {
			t.Fatalf("two peers, plan %+v", plan)
		}
		if spared := plan.Spared(); len(spared) != len(plan.Routes) {
			t.Fatalf("spared %v for routes %v", spared, plan.Routes)
		}
		// The masquerade spares exactly this node's pods, the accepted
		// routes' and multicast.
		want := []string{labNet.Own.String()}
		for _, r := range plan.Routes {
			want = append(want, r.Dst.String())
		}
		want = append(want, "224.0.0.0/4")
		rules := MasqueradeRules(labNet.Own, plan.Spared())
		if !strings.Contains(rules, "ip daddr != { "+strings.Join(want, ", ")+" } masquerade") {
			t.Fatalf("masquerade, want it to spare %v only:\n%s", want, rules)
		}
	})
}

// checkAccepted fails t unless route r keeps every rule of acceptance.
func checkAccepted(t *testing.T, r Route, h HostNet) {
	t.Helper()
	c, cl, own := r.Dst, labNet.Cluster, labNet.Own
	switch {
	case !c.Addr().Is4() || !r.Gateway.Is4():
		t.Fatalf("accepted %s: not IPv4", r)
	case c.Masked() != c || c.Bits() != own.Bits():
		t.Fatalf("accepted %s: not a network of the per-node size /%d", r, own.Bits())
	case !cl.Contains(c.Addr()) || !cl.Contains(lastAddr(c)):
		t.Fatalf("accepted %s: outside the cluster's pod range %s", r, cl)
	case c.Overlaps(own):
		t.Fatalf("accepted %s: over this node's pod CIDR", r)
	case cl.Contains(r.Gateway):
		t.Fatalf("accepted %s: next hop in the pod range", r)
	}
	for _, s := range specialAddrs {
		if a := netip.MustParseAddr(s); c.Contains(a) || r.Gateway == a {
			t.Fatalf("accepted %s: holds or goes through %s", r, a)
		}
	}
	onLink := false
	for _, a := range h.Addrs {
		if a.Prefix.Addr() == r.Gateway || c.Contains(a.Prefix.Addr()) || a.Prefix.Masked().Overlaps(c) {
			t.Fatalf("accepted %s: meets the host's address %s", r, a.Prefix)
		}
		onLink = onLink || (a.Dev == "eth0" && a.Prefix.Masked().Contains(r.Gateway))
	}
	if !onLink {
		t.Fatalf("accepted %s: next hop on no directly connected subnet", r)
	}
	for _, hr := range h.Routes {
		if hr.Dst.Bits() > 0 && hr.Metric != PodRouteMetric && hr.Dst.Overlaps(c) {
			t.Fatalf("accepted %s: over the host's route %s", r, hr)
		}
	}
}

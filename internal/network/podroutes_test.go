package network

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ma(s string) netip.Addr   { return netip.MustParseAddr(s) }

// Only peers reachable as a next hop on this host's subnets, with an
// IPv4 pod CIDR that is not this node's, get a route; the others are
// named with the reason.
func TestPodRoutes(t *testing.T) {
	h := HostNet{Addrs: []Addr{{Dev: "eth0", Prefix: mp("192.168.50.10/24")}, {Dev: "lo", Prefix: mp("127.0.0.1/8")}}}
	peers := []Peer{
		{Name: "b", PodCIDR: mp("10.244.2.0/24"), InternalIP: ma("192.168.50.12")},
		{Name: "a", PodCIDR: mp("10.244.1.0/24"), InternalIP: ma("192.168.50.11")},
		{Name: "pending", InternalIP: ma("192.168.50.13")},
		{Name: "far", PodCIDR: mp("10.244.3.0/24"), InternalIP: ma("10.9.9.9")},
		{Name: "v6", PodCIDR: mp("fd00::/64"), InternalIP: ma("192.168.50.14")},
		{Name: "noip", PodCIDR: mp("10.244.4.0/24")},
		{Name: "same", PodCIDR: mp("10.244.0.0/24"), InternalIP: ma("192.168.50.15")},
		{Name: "loopback", PodCIDR: mp("10.244.5.0/24"), InternalIP: ma("127.0.0.2")},
	}
	routes, skipped := PodRoutes(mp("10.244.0.0/24"), peers, h)
	want := []Route{
		{Dst: mp("10.244.1.0/24"), Gateway: ma("192.168.50.11"), Metric: PodRouteMetric},
		{Dst: mp("10.244.2.0/24"), Gateway: ma("192.168.50.12"), Metric: PodRouteMetric},
	}
	if !reflect.DeepEqual(routes, want) {
		t.Fatalf("routes %v, want %v", routes, want)
	}
	got := strings.Join(skipped, "\n")
	for _, s := range []string{"pending: no IPv4 pod CIDR", "far: InternalIP 10.9.9.9 is on no subnet", "v6: no IPv4 pod CIDR",
		"noip: no IPv4 InternalIP", "same: pod CIDR 10.244.0.0/24 overlaps this node's", "loopback: InternalIP 127.0.0.2 is on no subnet"} {
		if !strings.Contains(got, s) {
			t.Errorf("skipped does not say %q:\n%s", s, got)
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

package network

import (
	"net/netip"
	"strings"
	"testing"
)

// host is a two-NIC edge host: eth0 with the default route, eth1 on a
// site network, and the node's bridge.
func host() HostNet {
	h, _ := parseAddrsAndRoutes(`[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
	{"ifname":"eth0","addr_info":[{"family":"inet","local":"10.1.0.4","prefixlen":24},{"family":"inet6","local":"fe80::1","prefixlen":64}]},
	{"ifname":"eth1","addr_info":[{"family":"inet","local":"192.168.10.5","prefixlen":24}]},
	{"ifname":"cni0","addr_info":[{"family":"inet","local":"10.244.3.1","prefixlen":24}]}]`,
		`[{"dst":"default","gateway":"10.1.0.1","dev":"eth0","metric":100},
	{"dst":"10.1.0.0/24","dev":"eth0"},{"dst":"192.168.10.0/24","dev":"eth1"},
	{"dst":"10.244.3.0/24","dev":"cni0"},
	{"dst":"172.16.0.0/12","gateway":"192.168.10.1","dev":"eth1"}]`)
	return h
}

func parseAddrsAndRoutes(addrs, routes string) (HostNet, error) {
	a, err := parseAddrs([]byte(addrs))
	if err != nil {
		return HostNet{}, err
	}
	r, err := parseRoutes([]byte(routes))
	return HostNet{Addrs: a, Routes: r}, err
}

func TestGatewayProblems(t *testing.T) {
	h := host()
	if h.DefaultDev() != "eth0" {
		t.Fatalf("default dev %q", h.DefaultDev())
	}
	ok := []Route{
		{Dst: netip.MustParsePrefix("10.30.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1")},
		{Dst: netip.MustParsePrefix("10.31.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1"), Dev: "eth1"},
		{Dst: netip.MustParsePrefix("10.32.0.0/16"), Dev: "eth1"},
	}
	if p := GatewayProblems(ok, h); len(p) != 0 {
		t.Fatalf("good routes: %q", p)
	}
	bad := []Route{
		{Dst: netip.MustParsePrefix("10.30.0.0/16"), Gateway: netip.MustParseAddr("192.168.99.1")},
		{Dst: netip.MustParsePrefix("10.31.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("10.32.0.0/16"), Dev: "eth7"},
		{Dst: netip.MustParsePrefix("10.33.0.0/16"), Gateway: netip.MustParseAddr("127.0.0.2")},
	}
	p := GatewayProblems(bad, h)
	want := []string{"gateway 192.168.99.1 is not on any local subnet", "gateway 192.168.10.1 is not on a subnet of eth0", "dev eth7 has no IPv4 address", "gateway 127.0.0.2 is not on any local subnet"}
	if len(p) != len(want) {
		t.Fatalf("got %q", p)
	}
	for i, w := range want {
		if !strings.Contains(p[i], w) {
			t.Errorf("problem %d: %q, want %q", i, p[i], w)
		}
	}
}

func TestRouteOverlaps(t *testing.T) {
	h := host()
	if p := RouteOverlaps([]netip.Prefix{netip.MustParsePrefix("10.224.0.0/16")}, nil, h); len(p) != 0 {
		t.Fatalf("a CIDR only the default route covers: %q", p)
	}
	p := RouteOverlaps([]netip.Prefix{netip.MustParsePrefix("172.20.0.0/16")}, nil, h)
	if len(p) != 1 || !strings.Contains(p[0], "172.16.0.0/12 via 192.168.10.1 dev eth1") || !strings.Contains(p[0], "not the default route's eth0") {
		t.Fatalf("a host route takes it: %q", p)
	}
	// A static route start is about to add counts too, its dev taken from
	// its gateway's subnet.
	static := []Route{{Dst: netip.MustParsePrefix("10.224.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1")}}
	if p := RouteOverlaps([]netip.Prefix{netip.MustParsePrefix("10.224.0.0/16")}, static, h); len(p) != 1 || !strings.Contains(p[0], "leaves through eth1") {
		t.Fatalf("a static route takes it: %q", p)
	}
	if p := RouteOverlaps([]netip.Prefix{netip.MustParsePrefix("10.224.0.0/16")}, nil, HostNet{}); len(p) != 1 || !strings.Contains(p[0], "no IPv4 default route") {
		t.Fatalf("no default route: %q", p)
	}
}

func TestClusterOverlaps(t *testing.T) {
	h := host()
	ranges := map[string]netip.Prefix{"networking.podCIDR": netip.MustParsePrefix("10.244.3.0/24"), "networking.serviceCIDR": netip.MustParsePrefix("10.0.0.0/16")}
	if p := ClusterOverlaps(ranges, h, nil); len(p) != 0 {
		t.Fatalf("the node's own bridge is no overlap: %q", p)
	}
	ranges["networking.serviceCIDR"] = netip.MustParsePrefix("192.168.0.0/16")
	ranges["networking.podCIDR"] = netip.MustParsePrefix("172.17.0.0/16")
	p := ClusterOverlaps(ranges, h, nil)
	if len(p) != 3 || !strings.Contains(p[0], "networking.podCIDR 172.17.0.0/16 overlaps the host's route 172.16.0.0/12") ||
		!strings.Contains(p[1], "networking.serviceCIDR 192.168.0.0/16 overlaps 192.168.10.5/24 on eth1") ||
		!strings.Contains(p[2], "overlaps the host's route 192.168.10.0/24") {
		t.Fatalf("got %q", p)
	}
	// A route the node owns is not the host's.
	owned := []Route{h.Routes[4]}
	if p := ClusterOverlaps(map[string]netip.Prefix{"networking.podCIDR": netip.MustParsePrefix("172.17.0.0/16")}, h, owned); len(p) != 0 {
		t.Fatalf("owned route counted: %q", p)
	}
}

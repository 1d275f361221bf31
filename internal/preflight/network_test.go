package preflight

import (
	"context"
	"net/netip"
	"testing"

	"github.com/Azure/aks-flex-node/internal/network"
)

// edgeHost is a two-NIC host: eth0 with the default route, eth1 on a
// site network with a route to 172.16.0.0/12.
func edgeHost() network.HostNet {
	return network.HostNet{
		Addrs: []network.Addr{{Dev: "eth0", Prefix: netip.MustParsePrefix("10.1.0.4/24")}, {Dev: "eth1", Prefix: netip.MustParsePrefix("192.168.10.5/24")}},
		Routes: []network.Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.1.0.1"), Dev: "eth0"},
			{Dst: netip.MustParsePrefix("10.1.0.0/24"), Dev: "eth0"},
			{Dst: netip.MustParsePrefix("192.168.10.0/24"), Dev: "eth1"},
			{Dst: netip.MustParsePrefix("172.16.0.0/12"), Gateway: netip.MustParseAddr("192.168.10.1"), Dev: "eth1"},
		},
	}
}

func (h *fakeHost) netRun(name string) Result {
	h.t.Helper()
	env := h.env()
	env.ReadHostNet = func(context.Context) (network.HostNet, []network.Route, error) { return edgeHost(), nil, nil }
	return runNamed(h.t, env, name)
}

func TestHostRoutesCheck(t *testing.T) {
	h := newHost(t)
	want(t, h.netRun(NameHostRoutes), SeverityOK, "not enabled")
	h.set("hostRouting.staticRoutes", map[string]any{"enabled": true, "routes": []any{map[string]any{"destination": "10.30.0.0/16", "gateway": "192.168.10.1"}}})
	want(t, h.netRun(NameHostRoutes), SeverityOK, "1 static route(s) reachable", "proto 217")
	h.set("hostRouting.staticRoutes", map[string]any{"enabled": true, "routes": []any{map[string]any{"destination": "10.30.0.0/16", "gateway": "192.168.99.1"}}})
	want(t, h.netRun(NameHostRoutes), SeverityError, "hostRouting.staticRoutes", "gateway 192.168.99.1 is not on any local subnet")
	// On an image tree nothing is read.
	want(t, h.run(NameHostRoutes), SeverityWarning, "not read")
}

func TestRouteOverlapCheck(t *testing.T) {
	h := newHost(t)
	want(t, h.netRun(NameRouteOverlap), SeverityOK, "no expected CIDRs")
	h.set("hostRouting.routeOverlap.expectedCidrs", []any{"10.224.0.0/16"})
	want(t, h.netRun(NameRouteOverlap), SeverityOK, "route through eth0")
	h.set("hostRouting.routeOverlap.expectedCidrs", []any{"172.20.0.0/16"})
	want(t, h.netRun(NameRouteOverlap), SeverityWarning, "(WARN)", "leaves through eth1")
	h.set("hostRouting.routeOverlap.mode", "STRICT")
	want(t, h.netRun(NameRouteOverlap), SeverityError, "(STRICT)", "172.16.0.0/12")
}

func TestNetworkingOverlapCheck(t *testing.T) {
	h := newHost(t)
	h.procFile("sys/net/ipv4/ip_forward", "0\n")
	want(t, h.netRun(NameNetworkingOverlap), SeverityOK, "networking.dnsServiceIP 10.0.0.10/32", "not in the config", "--allocate-node-cidrs")
	h.set("networking.podCIDR", "172.17.0.0/24")
	want(t, h.netRun(NameNetworkingOverlap), SeverityError, "networking.podCIDR 172.17.0.0/24 overlaps the host's route 172.16.0.0/12")
	h.set("networking.podCIDR", "10.244.3.0/24")
	h.set("networking.serviceCIDR", "192.168.0.0/16")
	h.set("networking.dnsServiceIP", "192.168.0.10")
	want(t, h.netRun(NameNetworkingOverlap), SeverityError, "networking.serviceCIDR 192.168.0.0/16 overlaps 192.168.10.5/24 on eth1")
	h.set("networking.serviceCIDR", "10.0.0.0/16")
	h.set("networking.dnsServiceIP", "10.0.0.10")
	r := h.netRun(NameNetworkingOverlap)
	want(t, r, SeverityOK, "networking.podCIDR 10.244.3.0/24", "networking.serviceCIDR 10.0.0.0/16")
	// ip_forward that cannot be written.
	h.rmProc("sys/net/ipv4/ip_forward")
	want(t, h.netRun(NameNetworkingOverlap), SeverityError, "cannot set net.ipv4.ip_forward")
}

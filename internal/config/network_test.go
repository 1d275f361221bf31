package config

import (
	"errors"
	"strings"
	"testing"
)

// route is a static route for the hostRouting cases.
func route(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// Each invalid form of networking and hostRouting is refused with its
// JSON path, the way `config validate` prints it.
func TestNetworkValidation(t *testing.T) {
	routes := func(rs ...map[string]any) map[string]any {
		list := make([]any, len(rs))
		for i, r := range rs {
			list[i] = r
		}
		return map[string]any{"hostRouting.staticRoutes.enabled": true, "hostRouting.staticRoutes.routes": list}
	}
	with := func(m map[string]any, kv ...any) map[string]any {
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	good := route("destination", "10.30.0.0/16", "gateway", "192.168.10.1", "dev", "eth1", "metric", 100)
	const r0 = "hostRouting.staticRoutes.routes[0]"
	cases := []struct {
		name    string
		edits   map[string]any
		path    string // "" = valid
		contain string
	}{
		{"route ok", routes(good), "", ""},
		{"mode bridge ok", map[string]any{"networking.mode": "bridge"}, "", ""},
		{"mode cluster ok", map[string]any{"networking.mode": "cluster"}, "", ""},
		{"mode unknown", map[string]any{"networking.mode": "overlay"}, "networking.mode", `"overlay" is not one of bridge, cluster`},
		{"mode cluster with a pod CIDR", map[string]any{"networking.mode": "cluster", "networking.podCIDR": "10.244.3.0/24"}, "networking.podCIDR", "the cluster's CNI gives the pods their addresses"},
		{"cluster pod CIDR ok", map[string]any{"networking.clusterPodCIDR": "10.244.0.0/16", "networking.podCIDR": "10.244.3.0/24"}, "", ""},
		{"cluster pod CIDR not a CIDR", map[string]any{"networking.clusterPodCIDR": "10.244.0.0"}, "networking.clusterPodCIDR", "not a CIDR"},
		{"cluster pod CIDR host bits", map[string]any{"networking.clusterPodCIDR": "10.244.1.0/16"}, "networking.clusterPodCIDR", "the network is 10.244.0.0/16"},
		{"cluster pod CIDR half of IPv4", map[string]any{"networking.clusterPodCIDR": "128.0.0.0/1"}, "networking.clusterPodCIDR", "overlaps link-local"},
		{"cluster pod CIDR ipv6", map[string]any{"networking.clusterPodCIDR": "fd00::/48"}, "networking.clusterPodCIDR", "not IPv4"},
		{"cluster pod CIDR a host", map[string]any{"networking.clusterPodCIDR": "10.244.0.1/32"}, "networking.clusterPodCIDR", "no room"},
		{"pod CIDR outside the cluster's", map[string]any{"networking.clusterPodCIDR": "10.244.0.0/16", "networking.podCIDR": "10.9.3.0/24"}, "networking.podCIDR", "not inside networking.clusterPodCIDR 10.244.0.0/16"},
		{"pod CIDR wider than the cluster's", map[string]any{"networking.clusterPodCIDR": "10.244.0.0/16", "networking.podCIDR": "10.0.0.0/8"}, "networking.podCIDR", "not inside networking.clusterPodCIDR"},
		{"pod CIDR link-local", map[string]any{"networking.podCIDR": "169.254.0.0/24"}, "networking.podCIDR", "overlaps link-local"},
		{"cluster pod CIDR over the services", map[string]any{"networking.clusterPodCIDR": "10.96.0.0/12", "networking.serviceCIDR": "10.96.0.0/16", "networking.dnsServiceIP": "10.96.0.10"}, "networking.clusterPodCIDR", "overlaps networking.serviceCIDR"},
		{"cluster pod CIDR in cluster mode", map[string]any{"networking.mode": "cluster", "networking.clusterPodCIDR": "10.244.0.0/16"}, "networking.clusterPodCIDR", "the cluster's CNI routes the pods"},
		{"route into the cluster pod range", with(routes(route("destination", "10.244.9.0/24", "dev", "eth1")), "networking.clusterPodCIDR", "10.244.0.0/16"), r0 + ".destination", "overlaps networking.clusterPodCIDR 10.244.0.0/16"},
		{"route dev only ok", routes(route("destination", "10.30.0.0/16", "dev", "eth1")), "", ""},
		{"explicit default ok", routes(route("destination", "0.0.0.0/0", "gateway", "192.168.10.1")), "", ""},
		{"disabled routes still checked", map[string]any{"hostRouting.staticRoutes.routes": []any{route("destination", "10.30.0.0", "dev", "eth1")}}, r0 + ".destination", "not a CIDR"},
		{"destination missing", routes(route("gateway", "192.168.10.1")), r0 + ".destination", "is required"},
		{"destination not a CIDR", routes(route("destination", "10.30.0.0", "gateway", "192.168.10.1")), r0 + ".destination", "not a CIDR"},
		{"destination host bits", routes(route("destination", "10.30.1.0/16", "gateway", "192.168.10.1")), r0 + ".destination", "the network is 10.30.0.0/16"},
		{"implicit default route", routes(route("destination", "10.30.0.1/0", "gateway", "192.168.10.1")), r0 + ".destination", "is a default route; write 0.0.0.0/0"},
		{"ipv6 destination", routes(route("destination", "fd00::/64", "dev", "eth1")), r0 + ".destination", "not IPv4"},
		{"into the service range", routes(route("destination", "10.0.0.0/24", "dev", "eth1")), r0 + ".destination", "overlaps networking.dnsServiceIP 10.0.0.10/32"},
		{"into the service CIDR", with(routes(route("destination", "10.96.5.0/24", "dev", "eth1")), "networking.serviceCIDR", "10.96.0.0/16", "networking.dnsServiceIP", "10.96.0.10"), r0 + ".destination", "overlaps networking.serviceCIDR 10.96.0.0/16"},
		{"into the pod CIDR", with(routes(route("destination", "10.244.0.0/16", "dev", "eth1")), "networking.podCIDR", "10.244.3.0/24"), r0 + ".destination", "overlaps networking.podCIDR 10.244.3.0/24"},
		{"no gateway or dev", routes(route("destination", "10.30.0.0/16")), r0, "needs a gateway, a dev, or both"},
		{"gateway not an address", routes(route("destination", "10.30.0.0/16", "gateway", "gw1")), r0 + ".gateway", "not an IPv4 address"},
		{"gateway ipv6", routes(route("destination", "10.30.0.0/16", "gateway", "fe80::1")), r0 + ".gateway", "not an IPv4 address"},
		{"dev too long", routes(route("destination", "10.30.0.0/16", "dev", "a-very-long-interface")), r0 + ".dev", "not an interface name"},
		{"dev slash", routes(route("destination", "10.30.0.0/16", "dev", "eth/1")), r0 + ".dev", "not an interface name"},
		{"metric negative", routes(route("destination", "10.30.0.0/16", "dev", "eth1", "metric", -1)), r0 + ".metric", "between 0 and 4294967295"},
		{"metric too large", routes(route("destination", "10.30.0.0/16", "dev", "eth1", "metric", int64(1)<<32)), r0 + ".metric", "between 0 and"},
		{"metric of the pod routes", routes(route("destination", "10.30.0.0/16", "dev", "eth1", "metric", 217)), r0 + ".metric", "kept for the routes to other nodes' pod CIDRs"},
		{"duplicate", routes(good, good), "hostRouting.staticRoutes.routes[1]", "repeats routes[0]"},
		{"enabled without routes", map[string]any{"hostRouting.staticRoutes.enabled": true}, "hostRouting.staticRoutes.routes", "is empty"},
		{"expected CIDR", map[string]any{"hostRouting.routeOverlap.expectedCidrs": []any{"10.224.0.0/16", "10.225.0.0"}}, "hostRouting.routeOverlap.expectedCidrs[1]", "not a CIDR"},
		{"expected CIDR ipv6", map[string]any{"hostRouting.routeOverlap.expectedCidrs": []any{"fd00::/8"}}, "hostRouting.routeOverlap.expectedCidrs[0]", "not IPv4"},
		{"overlap mode", map[string]any{"hostRouting.routeOverlap.mode": "warn"}, "hostRouting.routeOverlap.mode", "WARN or STRICT"},
		{"overlap strict ok", map[string]any{"hostRouting.routeOverlap.mode": "STRICT", "hostRouting.routeOverlap.expectedCidrs": []any{"10.224.0.0/16"}}, "", ""},
		{"pod CIDR", map[string]any{"networking.podCIDR": "10.244.3.1/24"}, "networking.podCIDR", "host bits"},
		{"pod CIDR ok", map[string]any{"networking.podCIDR": "10.244.3.0/24"}, "", ""},
		{"service CIDR", map[string]any{"networking.serviceCIDR": "10.0.0/16"}, "networking.serviceCIDR", "not a CIDR"},
		{"pod overlaps service", map[string]any{"networking.podCIDR": "10.0.1.0/24", "networking.serviceCIDR": "10.0.0.0/16"}, "networking.podCIDR", "overlaps networking.serviceCIDR"},
		{"dns outside service", map[string]any{"networking.serviceCIDR": "10.96.0.0/16"}, "networking.dnsServiceIP", "not in networking.serviceCIDR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := base(t)
			for p, v := range tc.edits {
				set(m, p, v)
			}
			_, err := parse(t, m)
			if tc.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ve ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("want ValidationErrors, got %v", err)
			}
			for _, e := range ve {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.contain) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q; got:\n%v", tc.path, tc.contain, ve)
		})
	}
}

func TestClusterRanges(t *testing.T) {
	n := Networking{DNSServiceIP: "10.0.0.10"}
	if r := n.ClusterRanges(); len(r) != 1 || r["networking.dnsServiceIP"].String() != "10.0.0.10/32" {
		t.Errorf("dns only: %v", r)
	}
	n = Networking{DNSServiceIP: "10.0.0.10", ServiceCIDR: "10.0.0.0/16", PodCIDR: "10.244.1.0/24"}
	if r := n.ClusterRanges(); len(r) != 2 || r["networking.serviceCIDR"].String() != "10.0.0.0/16" || r["networking.podCIDR"].String() != "10.244.1.0/24" {
		t.Errorf("both: %v", r)
	}
}

// A config without networking.mode is a bridge-mode node, as every node
// was before the key existed.
func TestNetworkModeDefault(t *testing.T) {
	var c Config
	ApplyDefaults(&c)
	if c.Networking.Mode != NetworkModeBridge || c.Networking.ClusterCNI() {
		t.Fatalf("default mode %q, ClusterCNI %v", c.Networking.Mode, c.Networking.ClusterCNI())
	}
	c.Networking.Mode = NetworkModeCluster
	if !c.Networking.ClusterCNI() {
		t.Fatal("mode cluster: ClusterCNI false")
	}
}

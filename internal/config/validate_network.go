package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// The networking and hostRouting rules. What needs the host (is the
// gateway on a local subnet, where does an expected CIDR route) is
// preflight's: `config validate` runs without the host.

// MaxMetric is the largest route metric the kernel takes (a u32).
const MaxMetric = 1<<32 - 1

// PodRouteMetric is the metric of the routes a bridge-mode node programs
// to other nodes' pod CIDRs (internal/network keeps them apart from
// hostRouting's by it), so a static route may not use it.
const PodRouteMetric = 217

// The values of networking.mode.
const (
	// NetworkModeBridge: the agent writes the bridge + host-local CNI
	// config for the node's pod CIDR and routes to the other flex nodes'.
	NetworkModeBridge = "bridge"
	// NetworkModeCluster: the cluster's CNI (a DaemonSet) writes its own
	// config into the machine; the agent writes none, programs no pod
	// routes or masquerade, and the node is Ready once that config is in.
	NetworkModeCluster = "cluster"
)

// ClusterCNI says the cluster's CNI, not the agent, gives the node its
// pod network (networking.mode cluster).
func (n *Networking) ClusterCNI() bool { return n.Mode == NetworkModeCluster }

func (v *validator) networking(n *Networking) {
	switch n.Mode {
	case NetworkModeBridge:
	case NetworkModeCluster:
		if n.PodCIDR != "" {
			v.add("networking.podCIDR", "%q is set with networking.mode %q: the cluster's CNI gives the pods their addresses; remove it, or use mode %q", n.PodCIDR, n.Mode, NetworkModeBridge)
		}
	default:
		v.add("networking.mode", "%q is not one of %s, %s", n.Mode, NetworkModeBridge, NetworkModeCluster)
	}
	if net.ParseIP(n.DNSServiceIP) == nil {
		v.add("networking.dnsServiceIP", "%q is not an IP address", n.DNSServiceIP)
	}
	if !versionRE().MatchString(n.CNIVersion) {
		v.add("networking.cniVersion", "%q is not a version like 1.2.3", n.CNIVersion)
	}
	pod, pok := v.cidr("networking.podCIDR", n.PodCIDR)
	svc, sok := v.cidr("networking.serviceCIDR", n.ServiceCIDR)
	if pok && sok && pod.Overlaps(svc) {
		v.add("networking.podCIDR", "%s overlaps networking.serviceCIDR %s", pod, svc)
	}
	if pok && ReservedRange(pod) != "" {
		v.add("networking.podCIDR", "%s %s", pod, ReservedRange(pod))
	}
	v.clusterPodCIDR(n, pod, pok, svc, sok)
	if dns, err := netip.ParseAddr(n.DNSServiceIP); err == nil && sok && !svc.Contains(dns) {
		v.add("networking.dnsServiceIP", "%s is not in networking.serviceCIDR %s", dns, svc)
	}
	v.kubeProxy(n)
}

// kubeProxy checks who runs kube-proxy, and the agent's mode.
func (v *validator) kubeProxy(n *Networking) {
	switch n.KubeProxy {
	case KubeProxyDaemonSet, KubeProxyAgent:
	default:
		v.add("networking.kubeProxy", "%q must be %q (the cluster's kube-proxy DaemonSet, or none) or %q (the agent runs kube-proxy in the machine)", n.KubeProxy, KubeProxyDaemonSet, KubeProxyAgent)
		return
	}
	switch {
	case n.KubeProxyMode != "" && n.KubeProxyMode != KubeProxyIPTables && n.KubeProxyMode != KubeProxyNFTables:
		v.add("networking.kubeProxyMode", "%q must be %q or %q (empty: iptables unless the host has nft and no iptables)", n.KubeProxyMode, KubeProxyIPTables, KubeProxyNFTables)
	case n.KubeProxyMode != "" && !n.AgentKubeProxy():
		v.add("networking.kubeProxyMode", "%q is for the agent's kube-proxy, but networking.kubeProxy is %q", n.KubeProxyMode, n.KubeProxy)
	}
	// The agent's kube-proxy tells this node's pods by the bridge they
	// come in on (cni0); a cluster CNI has no such bridge, and the node is
	// not told the cluster's pod range either, so it could not tell local
	// traffic at all.
	if n.AgentKubeProxy() && n.ClusterCNI() {
		v.add("networking.kubeProxy", "%q needs networking.mode %q: the agent's kube-proxy finds this node's pods by the bridge it makes (cni0), which networking.mode %q has not; use %q (the cluster's kube-proxy DaemonSet, or a CNI that replaces kube-proxy)", n.KubeProxy, NetworkModeBridge, n.Mode, KubeProxyDaemonSet)
	}
}

// cidr checks an optional CIDR key: a network address with its prefix
// length (no host bits, so what is meant is what is written).
func (v *validator) cidr(path, s string) (netip.Prefix, bool) {
	if s == "" {
		return netip.Prefix{}, false
	}
	p, msg := ParseCIDR(s)
	if msg != "" {
		v.add(path, "%q %s", s, msg)
		return netip.Prefix{}, false
	}
	return p, true
}

// ParseCIDR is the CIDR rule: a network such as 10.2.0.0/16, host bits
// clear; msg says what is wrong, "" for a good one.
func ParseCIDR(s string) (netip.Prefix, string) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, "is not a CIDR such as 10.2.0.0/16"
	}
	if p.Masked() != p {
		return p, fmt.Sprintf("has host bits set; the network is %s", p.Masked())
	}
	return p, ""
}

// ClusterRanges are the cluster's own ranges the config names: the pod
// CIDR and the cluster's pod range, and the service CIDR or, without one,
// the DNS service IP. A host
// route into them would take the cluster's traffic off the node.
func (n *Networking) ClusterRanges() map[string]netip.Prefix {
	out := map[string]netip.Prefix{}
	if p, msg := ParseCIDR(n.PodCIDR); n.PodCIDR != "" && msg == "" {
		out["networking.podCIDR"] = p
	}
	if p, msg := ParseCIDR(n.ClusterPodCIDR); n.ClusterPodCIDR != "" && msg == "" {
		out["networking.clusterPodCIDR"] = p
	}
	if p, msg := ParseCIDR(n.ServiceCIDR); n.ServiceCIDR != "" && msg == "" {
		out["networking.serviceCIDR"] = p
	} else if a, err := netip.ParseAddr(n.DNSServiceIP); err == nil {
		out["networking.dnsServiceIP"] = netip.PrefixFrom(a, a.BitLen())
	}
	return out
}

// hostRouting checks each static route and the overlap settings.
func (v *validator) hostRouting(h *HostRouting, n *Networking) {
	seen := map[string]int{}
	for i, r := range h.StaticRoutes.Routes {
		path := fmt.Sprintf("hostRouting.staticRoutes.routes[%d]", i)
		v.staticRoute(path, r, n)
		key := fmt.Sprintf("%s metric %d", r.Destination, r.Metric)
		if j, dup := seen[key]; dup {
			v.add(path, "repeats routes[%d] (%s): the kernel keeps one route per destination and metric", j, key)
		}
		seen[key] = i
	}
	if h.StaticRoutes.Enabled && len(h.StaticRoutes.Routes) == 0 {
		v.add("hostRouting.staticRoutes.routes", "is empty but hostRouting.staticRoutes.enabled is true")
	}
	for i, c := range h.RouteOverlap.ExpectedCIDRs {
		path := fmt.Sprintf("hostRouting.routeOverlap.expectedCidrs[%d]", i)
		if p, msg := ParseCIDR(c); msg != "" {
			v.add(path, "%q %s", c, msg)
		} else if !p.Addr().Is4() {
			v.add(path, "%q is not IPv4 (hostRouting is IPv4 only, as upstream's)", c)
		}
	}
	switch h.RouteOverlap.Mode {
	case "", RouteOverlapWarn, RouteOverlapStrict:
	default:
		v.add("hostRouting.routeOverlap.mode", "%q must be WARN or STRICT", h.RouteOverlap.Mode)
	}
}

// staticRoute checks one route. A default route is taken only when it is
// written as one (0.0.0.0/0): a /0 on any other address is a typo that
// would send everything through the gateway.
func (v *validator) staticRoute(path string, r StaticRoute, n *Networking) {
	dst, err := netip.ParsePrefix(r.Destination)
	switch {
	case r.Destination == "":
		v.add(path+".destination", "is required")
	case err != nil:
		v.add(path+".destination", "%q is not a CIDR such as 10.2.0.0/16", r.Destination)
	case !dst.Addr().Is4():
		v.add(path+".destination", "%q is not IPv4 (hostRouting is IPv4 only, as upstream's)", r.Destination)
	case dst.Bits() == 0 && r.Destination != "0.0.0.0/0":
		v.add(path+".destination", "%q is a default route; write 0.0.0.0/0 if a default route is meant", r.Destination)
	case dst.Masked() != dst:
		v.add(path+".destination", "%q has host bits set; the network is %s", r.Destination, dst.Masked())
	default:
		ranges := n.ClusterRanges()
		for _, key := range sortedKeys(ranges) {
			if c := ranges[key]; dst.Overlaps(c) && dst.Bits() > 0 {
				v.add(path+".destination", "%s overlaps %s %s: the cluster's traffic would leave through this route", dst, key, c)
			}
		}
	}
	if r.Gateway == "" && r.Dev == "" {
		v.add(path, "needs a gateway, a dev, or both")
	}
	if r.Gateway != "" {
		if gw, err := netip.ParseAddr(r.Gateway); err != nil || !gw.Is4() {
			v.add(path+".gateway", "%q is not an IPv4 address", r.Gateway)
		}
	}
	if r.Dev != "" {
		if msg := InterfaceName(r.Dev); msg != "" {
			v.add(path+".dev", "%q %s", r.Dev, msg)
		}
	}
	if r.Metric < 0 || r.Metric > MaxMetric {
		v.add(path+".metric", "%d must be between 0 and %d", r.Metric, int64(MaxMetric))
	}
	if r.Metric == PodRouteMetric {
		v.add(path+".metric", "%d is kept for the routes to other nodes' pod CIDRs; choose another", r.Metric)
	}
}

// InterfaceName is the kernel's rule for a network interface name: 1-15
// bytes, not . or .., no '/', ':' or white space.
func InterfaceName(s string) string {
	if s == "" || len(s) > 15 || s == "." || s == ".." || strings.ContainsAny(s, "/: \t\n\r") {
		return "is not an interface name (1-15 characters, no '/', ':' or spaces)"
	}
	return ""
}

// reservedRanges are the ranges no pod network may touch, IPv4 and IPv6:
// "this network", loopback, link-local (the metadata endpoint,
// 169.254.169.254, is in it), multicast, the reserved block with the
// broadcast address, the unspecified and IPv4-mapped IPv6 addresses.
var reservedRanges = []struct {
	p    netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (the metadata endpoint's)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (with the broadcast address)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// ReservedRange is the pod network rule for special addresses: "" when p
// touches none of them, else which range it overlaps (128.0.0.0/1
// overlaps link-local and multicast). The config keys and the pod routes
// the agent takes from the Nodes both use it.
func ReservedRange(p netip.Prefix) string {
	for _, r := range reservedRanges {
		if p.IsValid() && r.p.Overlaps(p) {
			return fmt.Sprintf("overlaps %s %s", r.what, r.p)
		}
	}
	return ""
}

// clusterPodCIDR checks networking.clusterPodCIDR against the other
// ranges: IPv4 (the pod routes are), no reserved range, holding
// networking.podCIDR, apart from networking.serviceCIDR.
func (v *validator) clusterPodCIDR(n *Networking, pod netip.Prefix, pok bool, svc netip.Prefix, sok bool) {
	const path = "networking.clusterPodCIDR"
	if n.ClusterPodCIDR != "" && n.ClusterCNI() {
		v.add(path, "%q is set with networking.mode %q: the cluster's CNI routes the pods; remove it, or use mode %q", n.ClusterPodCIDR, n.Mode, NetworkModeBridge)
		return
	}
	cl, ok := v.cidr(path, n.ClusterPodCIDR)
	if !ok {
		return
	}
	switch {
	case !cl.Addr().Is4():
		v.add(path, "%s is not IPv4 (the routes between bridge-mode nodes are IPv4 only)", cl)
	case ReservedRange(cl) != "":
		v.add(path, "%s %s", cl, ReservedRange(cl))
	case cl.Bits() >= 32:
		v.add(path, "%s leaves no room for a node's pod CIDR", cl)
	case pok && !(cl.Bits() <= pod.Bits() && cl.Contains(pod.Addr())):
		v.add("networking.podCIDR", "%s is not inside networking.clusterPodCIDR %s", pod, cl)
	}
	if sok && cl.Overlaps(svc) {
		v.add(path, "%s overlaps networking.serviceCIDR %s", cl, svc)
	}
}

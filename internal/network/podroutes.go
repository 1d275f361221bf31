package network

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/Azure/aks-flex-node/internal/config"
)

// PodRouteMetric is the metric of the routes to other nodes' pod CIDRs.
// They carry RouteProtocol like hostRouting's static routes; the metric
// keeps the two sets apart (config refuses it for a static route), so the
// agent's loop that follows the Nodes and start's apply-host-routes never
// remove each other's routes. Reset removes both.
const PodRouteMetric = config.PodRouteMetric

func isPodRoute(r Route) bool { return r.Metric == PodRouteMetric }

// Peer is what a bridge-mode node needs of another Node: its pod CIDR and
// the address its pods are reached through (the Node's InternalIP).
type Peer struct {
	Name       string
	PodCIDR    netip.Prefix
	InternalIP netip.Addr
}

// PodNet is what a Node's pod CIDR must fit to be routed to and spared
// from the masquerade: a Node object is cluster data, which anyone allowed
// to write Nodes (and every node, for its own at registration) chooses,
// so the host's routes follow the config, not the Node.
type PodNet struct {
	// Cluster is networking.clusterPodCIDR: every pod CIDR routed is
	// inside it. Invalid (unset): nothing is.
	Cluster netip.Prefix
	// Own is this node's pod CIDR. The controller manager gives every
	// node one of the same size, so a peer's must have Own's.
	Own netip.Prefix
}

// Refusal is a Node the routes and the masquerade leave out, and why. A
// refusal is something to tell an operator about (a log line, an Event);
// a Node with nothing to route yet (no pod CIDR, no InternalIP) is not
// refused but skipped.
type Refusal struct {
	Node   string
	Reason string
}

func (r Refusal) String() string { return r.Node + ": " + r.Reason }

// PodRoutePlan is what the host is made to match: the routes to the
// accepted peers' pod CIDRs, the peers skipped and those refused.
type PodRoutePlan struct {
	Routes  []Route
	Skipped []string
	Refused []Refusal
}

// Spared are the pod networks the masquerade leaves alone: the accepted
// routes' destinations only (own is MasqueradeRules's to add).
func (p PodRoutePlan) Spared() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(p.Routes))
	for _, r := range p.Routes {
		out = append(out, r.Dst)
	}
	return out
}

// CheckOwn says why this node's own pod CIDR may not be used ("" when it
// may): it is the source the masquerade matches and a range it spares,
// and without networking.podCIDR it is the Node's, cluster data like any
// other.
func (pn PodNet) CheckOwn() string {
	switch {
	case !pn.Own.IsValid() || !pn.Own.Addr().Is4():
		return "this node has no IPv4 pod CIDR"
	case pn.Own.Masked() != pn.Own:
		return fmt.Sprintf("this node's pod CIDR %s has host bits set", pn.Own)
	case config.ReservedRange(pn.Own) != "":
		return fmt.Sprintf("this node's pod CIDR %s %s", pn.Own, config.ReservedRange(pn.Own))
	case pn.Cluster.IsValid() && !inside(pn.Own, pn.Cluster):
		return fmt.Sprintf("this node's pod CIDR %s is not inside networking.clusterPodCIDR %s", pn.Own, pn.Cluster)
	}
	return ""
}

// inside says p lies wholly in c.
func inside(p, c netip.Prefix) bool {
	return p.Addr().BitLen() == c.Addr().BitLen() && c.Bits() <= p.Bits() && c.Contains(p.Addr())
}

// CheckPodCIDR says why a peer's pod CIDR c may not be routed on host h
// ("" when it may): it must be a network inside the cluster's pod range,
// of this node's pod CIDR's size, apart from this node's, from the
// reserved ranges (loopback, link-local, multicast, IPv4 and IPv6), and
// from every address and route the host has of its own (the default route
// and the pod routes aside).
func (pn PodNet) CheckPodCIDR(c netip.Prefix, h HostNet) string {
	switch {
	case !pn.Cluster.IsValid():
		return fmt.Sprintf("pod CIDR %s: networking.clusterPodCIDR is not set, so no Node's pod CIDR is routed", c)
	case c.Masked() != c:
		return fmt.Sprintf("pod CIDR %s has host bits set", c)
	case config.ReservedRange(c) != "":
		return fmt.Sprintf("pod CIDR %s %s", c, config.ReservedRange(c))
	case !inside(c, pn.Cluster):
		return fmt.Sprintf("pod CIDR %s is not inside networking.clusterPodCIDR %s", c, pn.Cluster)
	case c.Bits() != pn.Own.Bits():
		return fmt.Sprintf("pod CIDR %s is not a /%d, the per-node size (this node's is %s)", c, pn.Own.Bits(), pn.Own)
	case c.Overlaps(pn.Own):
		return fmt.Sprintf("pod CIDR %s overlaps this node's %s", c, pn.Own)
	}
	for _, a := range h.Addrs {
		if a.Prefix.Masked().Overlaps(c) || c.Contains(a.Prefix.Addr()) {
			return fmt.Sprintf("pod CIDR %s overlaps the host's address %s on %s", c, a.Prefix, a.Dev)
		}
	}
	for _, r := range h.Routes {
		if r.Dst.Bits() > 0 && !isPodRoute(r) && r.Dst.Overlaps(c) {
			return fmt.Sprintf("pod CIDR %s overlaps the host's route %s", c, r)
		}
	}
	return ""
}

// CheckNextHop says why a peer's InternalIP ip may not be the next hop to
// its pods on host h ("" when it may): it must be on a directly connected
// subnet of the host (not loopback's, not this node's bridge's), be no
// address of the host's own nor its subnet's network or broadcast
// address, and lie outside the pod ranges and the reserved ones.
func (pn PodNet) CheckNextHop(ip netip.Addr, h HostNet) string {
	single := netip.PrefixFrom(ip, ip.BitLen())
	switch {
	case config.ReservedRange(single) != "":
		return fmt.Sprintf("InternalIP %s %s", ip, config.ReservedRange(single))
	case pn.Own.Contains(ip) || pn.Cluster.Contains(ip):
		return fmt.Sprintf("InternalIP %s is in the pod range", ip)
	}
	for _, a := range h.Addrs {
		if a.Prefix.Addr() == ip {
			return fmt.Sprintf("InternalIP %s is this host's own address (on %s)", ip, a.Dev)
		}
	}
	for _, a := range h.Addrs {
		sub := a.Prefix.Masked()
		if a.Dev == "lo" || a.Dev == BridgeName || !sub.Contains(ip) {
			continue
		}
		if sub.Bits() <= sub.Addr().BitLen()-2 && (ip == sub.Addr() || ip == lastAddr(sub)) {
			return fmt.Sprintf("InternalIP %s is the network or broadcast address of %s on %s", ip, sub, a.Dev)
		}
		return ""
	}
	return fmt.Sprintf("InternalIP %s is on no directly connected subnet of this host, so it is refused as a next hop (host addresses: %s)", ip, h.addrList())
}

// lastAddr is the last address of p (its broadcast address for IPv4).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// PodRoutes plans the routes to the peers' pod CIDRs, each via the peer's
// InternalIP: only IPv4 peers that pass CheckPodCIDR and CheckNextHop
// (a Node elsewhere, say a cloud node behind a router with its own CNI,
// is not routed to), and whose pod CIDR no other peer's overlaps (two
// Nodes claiming one range are both refused: which one is lying is not
// the host's to guess). pn.CheckOwn must have passed.
func PodRoutes(pn PodNet, peers []Peer, h HostNet) PodRoutePlan {
	var plan PodRoutePlan
	var cand []Peer
	for _, p := range peers {
		if !p.PodCIDR.IsValid() || !p.PodCIDR.Addr().Is4() {
			plan.Skipped = append(plan.Skipped, p.Name+": no IPv4 pod CIDR")
			continue
		}
		// The pod CIDR is judged before the InternalIP is looked for: a
		// hostile one is told at once, not when an address comes.
		why := pn.CheckPodCIDR(p.PodCIDR, h)
		if why == "" && (!p.InternalIP.IsValid() || !p.InternalIP.Is4()) {
			plan.Skipped = append(plan.Skipped, p.Name+": no IPv4 InternalIP")
			continue
		}
		if why == "" {
			why = pn.CheckNextHop(p.InternalIP, h)
		}
		if why != "" {
			plan.Refused = append(plan.Refused, Refusal{p.Name, why})
			continue
		}
		cand = append(cand, p)
	}
	clashes := overlapping(cand)
	for i, p := range cand {
		if clash := clashes[i]; len(clash) > 0 {
			slices.Sort(clash)
			plan.Refused = append(plan.Refused, Refusal{p.Name, fmt.Sprintf("pod CIDR %s is claimed by Node %v too", p.PodCIDR, clash)})
			continue
		}
		plan.Routes = append(plan.Routes, Route{Dst: p.PodCIDR, Gateway: p.InternalIP, Metric: PodRouteMetric})
	}
	slices.SortFunc(plan.Routes, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	slices.SortFunc(plan.Refused, func(a, b Refusal) int { return cmp.Compare(a.Node, b.Node) })
	slices.Sort(plan.Skipped)
	return plan
}

// overlapping is, for each peer of cand (by index), the names of the
// others whose pod CIDR overlaps its own. One sweep over the ranges in
// order of their first address, keeping those not yet ended: O(N log N)
// plus the clashes, where comparing every pair cost a million
// comparisons at a thousand Nodes each time a route changed, on every
// node (the fleet simulator's thousand agents spent seconds of CPU on
// each new InternalIP). The pod CIDRs are IPv4.
func overlapping(cand []Peer) map[int][]string {
	type span struct {
		first, last uint32
		i           int
	}
	spans := make([]span, len(cand))
	for i, p := range cand {
		pf := p.PodCIDR.Masked()
		a := pf.Addr().As4()
		first := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		// A shift by 32 (a /0) is 0 in Go, so the host mask is all ones.
		spans[i] = span{first, first | (uint32(1)<<(32-pf.Bits()) - 1), i}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.first, b.first) })
	out := map[int][]string{}
	var open []span // ranges begun before the current one that may still overlap it
	for _, s := range spans {
		still := open[:0]
		for _, o := range open {
			if o.last >= s.first { // began no later, ends no earlier than s begins
				still = append(still, o)
				out[s.i] = append(out[s.i], cand[o.i].Name)
				out[o.i] = append(out[o.i], cand[s.i].Name)
			}
		}
		open = append(still, s)
	}
	return out
}

// ApplyPodRoutes makes the owned routes to other nodes' pod CIDRs exactly
// want (from PodRoutes), leaving hostRouting's static routes alone.
func (rs Routes) ApplyPodRoutes(ctx context.Context, want []Route) (bool, error) {
	for _, w := range want {
		if !isPodRoute(w) {
			return false, fmt.Errorf("route %s is not a pod route (metric %d)", w, PodRouteMetric)
		}
	}
	return rs.apply(ctx, want, isPodRoute)
}

package network

import (
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

// PodRoutes are the routes to the peers' pod CIDRs, each via the peer's
// InternalIP: only IPv4 peers whose InternalIP is on one of this host's
// subnets (a next hop the kernel takes; a Node elsewhere, say a cloud
// node with its own CNI, is not routed to) and whose pod CIDR is not
// own's. skipped names the peers left out and why.
func PodRoutes(own netip.Prefix, peers []Peer, h HostNet) (routes []Route, skipped []string) {
	for _, p := range peers {
		switch {
		case !p.PodCIDR.IsValid() || !p.PodCIDR.Addr().Is4():
			skipped = append(skipped, p.Name+": no IPv4 pod CIDR")
		case !p.InternalIP.IsValid() || !p.InternalIP.Is4():
			skipped = append(skipped, p.Name+": no IPv4 InternalIP")
		case own.IsValid() && own.Overlaps(p.PodCIDR):
			skipped = append(skipped, fmt.Sprintf("%s: pod CIDR %s overlaps this node's %s", p.Name, p.PodCIDR, own))
		case h.localDev(p.InternalIP, "") == "":
			skipped = append(skipped, fmt.Sprintf("%s: InternalIP %s is on no subnet of this host", p.Name, p.InternalIP))
		default:
			routes = append(routes, Route{Dst: p.PodCIDR.Masked(), Gateway: p.InternalIP, Metric: PodRouteMetric})
		}
	}
	slices.SortFunc(routes, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	return routes, skipped
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

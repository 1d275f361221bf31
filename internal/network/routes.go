// Package network owns what aks-flex-node does to the host's network
// outside the machine: the routes it owns (hostRouting's static routes,
// marked with RouteProtocol), what it reads of the host's addresses and
// routes for preflight, and the bridge network the node's CNI leaves on
// the host (cni0, its veths, the plugins' iptables chains and nft
// tables), which reset removes. The machine shares the host's network
// namespace (its .nspawn file says VirtualEthernet=no and no private
// network), so all of it lives in the host's namespace. Host commands
// (ip, iptables, nft) go through a hostos.Runner.
package network

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/hostos"
)

// RouteProtocol is the routing protocol number (rtm_protocol, `ip route
// ... proto N`) that marks a route as aks-flex-node's: what it adds it
// marks with it, and it changes and removes only routes that carry it.
// 217 is in the range no routing daemon registers (iproute2's rt_protos
// names numbers up to 192); `ip route show proto 217` lists ours.
const RouteProtocol = 217

// proto is RouteProtocol as ip(8) takes it.
var proto = strconv.Itoa(RouteProtocol)

// Route is one IPv4 route in the main table. An invalid Gateway means
// none (a device route); an empty Dev lets the kernel choose from the
// gateway.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
	Dev     string
	Metric  uint32
}

func (r Route) String() string {
	s := r.Dst.String()
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	return s + " metric " + strconv.FormatUint(uint64(r.Metric), 10)
}

// args are the route's selector and attributes for `ip route`.
func (r Route) args() []string {
	a := []string{r.Dst.String()}
	if r.Gateway.IsValid() {
		a = append(a, "via", r.Gateway.String())
	}
	if r.Dev != "" {
		a = append(a, "dev", r.Dev)
	}
	return append(a, "metric", strconv.FormatUint(uint64(r.Metric), 10))
}

// satisfiedBy says installed route have is what want asks for: a want
// without a dev takes whichever device the kernel chose.
func (want Route) satisfiedBy(have Route) bool {
	return want.Dst == have.Dst && want.Gateway == have.Gateway && want.Metric == have.Metric &&
		(want.Dev == "" || want.Dev == have.Dev)
}

// StaticRoutes are the routes hostRouting asks for: none unless
// hostRouting.staticRoutes.enabled. c is validated, so every value
// parses.
func StaticRoutes(c *config.Config) []Route {
	sr := c.HostRouting.StaticRoutes
	if !sr.Enabled {
		return nil
	}
	out := make([]Route, 0, len(sr.Routes))
	for _, r := range sr.Routes {
		dst, _ := netip.ParsePrefix(r.Destination)
		var gw netip.Addr
		if r.Gateway != "" {
			gw, _ = netip.ParseAddr(r.Gateway)
		}
		out = append(out, Route{Dst: dst, Gateway: gw, Dev: r.Dev, Metric: uint32(r.Metric)})
	}
	return out
}

// Routes changes the host's routes through ip(8), only ever those
// marked with RouteProtocol.
type Routes struct {
	Run hostos.Runner // nil runs ip for real
}

func (rs Routes) ip(ctx context.Context, args ...string) ([]byte, error) {
	run := rs.Run
	if run == nil {
		run = hostos.Exec
	}
	return run(ctx, "ip", args...)
}

// ipRoute is one route of `ip -j route show`.
type ipRoute struct {
	Dst      string `json:"dst"`
	Gateway  string `json:"gateway"`
	Dev      string `json:"dev"`
	Metric   uint32 `json:"metric"`
	Protocol string `json:"protocol"`
	Type     string `json:"type"`
}

func (r ipRoute) route() (Route, error) {
	dst := r.Dst
	if dst == "default" {
		dst = "0.0.0.0/0"
	} else if !strings.Contains(dst, "/") {
		dst += "/32"
	}
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		return Route{}, fmt.Errorf("ip route: destination %q: %w", r.Dst, err)
	}
	var gw netip.Addr
	if r.Gateway != "" {
		if gw, err = netip.ParseAddr(r.Gateway); err != nil {
			return Route{}, fmt.Errorf("ip route: gateway %q: %w", r.Gateway, err)
		}
	}
	return Route{Dst: p, Gateway: gw, Dev: r.Dev, Metric: r.Metric}, nil
}

// parseRoutes reads `ip -j route show` output.
func parseRoutes(out []byte) ([]Route, error) {
	var raw []ipRoute
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("ip -j route: %w", err)
	}
	var rs []Route
	for _, r := range raw {
		if r.Type != "" && r.Type != "unicast" {
			continue // local, broadcast, unreachable: not forwarding routes
		}
		rt, err := r.route()
		if err != nil {
			return nil, err
		}
		rs = append(rs, rt)
	}
	return rs, nil
}

// Owned lists the IPv4 routes of the main table that carry RouteProtocol.
func (rs Routes) Owned(ctx context.Context) ([]Route, error) {
	out, err := rs.ip(ctx, "-4", "-j", "route", "show", "table", "main", "proto", proto)
	if err != nil {
		return nil, err
	}
	return parseRoutes(out)
}

// Apply makes the owned static routes (hostRouting's) exactly want: it
// removes owned routes want no longer names, then adds what is missing.
// The routes to other nodes' pod CIDRs (metric PodRouteMetric) are
// ApplyPodRoutes's and left alone. A route to the same destination and
// metric that aks-flex-node does not own is never replaced: the add fails
// and says so.
func (rs Routes) Apply(ctx context.Context, want []Route) (changed bool, err error) {
	return rs.apply(ctx, want, func(r Route) bool { return !isPodRoute(r) })
}

// apply makes the owned routes within scope exactly want.
func (rs Routes) apply(ctx context.Context, want []Route, scope func(Route) bool) (changed bool, err error) {
	have, err := rs.Owned(ctx)
	if err != nil {
		return false, err
	}
	var missing []Route
	for _, w := range want {
		if !anySatisfies(w, have) {
			missing = append(missing, w)
		}
	}
	for _, h := range have {
		if !scope(h) || anyWants(want, h) {
			continue
		}
		if _, err := rs.ip(ctx, append([]string{"-4", "route", "del"}, append(h.args(), "proto", proto)...)...); err != nil {
			return changed, fmt.Errorf("remove owned route %s: %w", h, err)
		}
		changed = true
	}
	for _, w := range missing {
		if _, err := rs.ip(ctx, append([]string{"-4", "route", "add"}, append(w.args(), "proto", proto)...)...); err != nil {
			return changed, fmt.Errorf("add route %s (proto %s): %w; a route to %s with metric %d that aks-flex-node does not own may be in the way (ip route show %s)", w, proto, err, w.Dst, w.Metric, w.Dst)
		}
		changed = true
	}
	return changed, nil
}

// RemoveAll removes every owned route: the static ones and those to other
// nodes' pod CIDRs.
func (rs Routes) RemoveAll(ctx context.Context) (bool, error) {
	return rs.apply(ctx, nil, func(Route) bool { return true })
}

func anySatisfies(w Route, have []Route) bool {
	for _, h := range have {
		if w.satisfiedBy(h) {
			return true
		}
	}
	return false
}

func anyWants(want []Route, h Route) bool {
	for _, w := range want {
		if w.satisfiedBy(h) {
			return true
		}
	}
	return false
}

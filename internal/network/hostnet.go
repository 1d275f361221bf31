package network

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// HostNet is what preflight reads of the host's IPv4 network: its
// addresses with their subnets, and the main table's routes.
type HostNet struct {
	Addrs  []Addr
	Routes []Route
}

// Addr is an address on an interface, with its prefix length.
type Addr struct {
	Dev    string
	Prefix netip.Prefix // the address, not masked
}

// ReadHostNet reads the host's IPv4 addresses and main-table routes.
func (rs Routes) ReadHostNet(ctx context.Context) (HostNet, error) {
	out, err := rs.ip(ctx, "-4", "-j", "addr", "show")
	if err != nil {
		return HostNet{}, err
	}
	addrs, err := parseAddrs(out)
	if err != nil {
		return HostNet{}, err
	}
	if out, err = rs.ip(ctx, "-4", "-j", "route", "show", "table", "main"); err != nil {
		return HostNet{}, err
	}
	routes, err := parseRoutes(out)
	if err != nil {
		return HostNet{}, err
	}
	return HostNet{Addrs: addrs, Routes: routes}, nil
}

func parseAddrs(out []byte) ([]Addr, error) {
	var links []struct {
		IfName   string `json:"ifname"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("ip -j addr: %w", err)
	}
	var addrs []Addr
	for _, l := range links {
		for _, a := range l.AddrInfo {
			ip, err := netip.ParseAddr(a.Local)
			if err != nil || a.Family != "inet" {
				continue
			}
			addrs = append(addrs, Addr{Dev: l.IfName, Prefix: netip.PrefixFrom(ip, a.PrefixLen)})
		}
	}
	return addrs, nil
}

// DefaultDev is the device of the main table's default route with the
// lowest metric; "" when there is none.
func (h HostNet) DefaultDev() string {
	best, dev := uint64(1<<33), ""
	for _, r := range h.Routes {
		if r.Dst.Bits() == 0 && uint64(r.Metric) < best {
			best, dev = uint64(r.Metric), r.Dev
		}
	}
	return dev
}

// localDev is the device whose subnet holds a (ignoring loopback), "" for
// none; with dev set, only that device's subnets count.
func (h HostNet) localDev(a netip.Addr, dev string) string {
	for _, ad := range h.Addrs {
		if ad.Dev == "lo" || (dev != "" && ad.Dev != dev) {
			continue
		}
		if ad.Prefix.Masked().Contains(a) {
			return ad.Dev
		}
	}
	return ""
}

// hasDev says an interface named dev has an address (or is listed).
func (h HostNet) hasDev(dev string) bool {
	for _, ad := range h.Addrs {
		if ad.Dev == dev {
			return true
		}
	}
	return false
}

// GatewayProblems says, one line a route, which static routes cannot be
// installed as written: a gateway on no local subnet (of its dev, when
// one is named), a dev the host does not have.
func GatewayProblems(routes []Route, h HostNet) []string {
	var out []string
	for _, r := range routes {
		switch {
		case r.Gateway.IsValid() && h.localDev(r.Gateway, r.Dev) == "":
			where := "any local subnet"
			if r.Dev != "" {
				where = "a subnet of " + r.Dev
			}
			out = append(out, fmt.Sprintf("%s: gateway %s is not on %s (host addresses: %s)", r.Dst, r.Gateway, where, h.addrList()))
		case !r.Gateway.IsValid() && !h.hasDev(r.Dev):
			out = append(out, fmt.Sprintf("%s: dev %s has no IPv4 address on this host", r.Dst, r.Dev))
		}
	}
	return out
}

func (h HostNet) addrList() string {
	var s []string
	for _, a := range h.Addrs {
		s = append(s, a.Prefix.String()+" on "+a.Dev)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// RouteOverlaps says which expected CIDRs do not route through the
// default route's device: a more specific route to part of one (on the
// host now, or among the static routes start will add) leaves through
// another device, or there is no default route at all.
func RouteOverlaps(expected []netip.Prefix, static []Route, h HostNet) []string {
	if len(expected) == 0 {
		return nil
	}
	def := h.DefaultDev()
	if def == "" {
		return []string{"the host has no IPv4 default route, so no expected CIDR routes through its interface"}
	}
	var out []string
	for _, e := range expected {
		for _, r := range append(append([]Route(nil), h.Routes...), static...) {
			dev := r.Dev
			if dev == "" && r.Gateway.IsValid() {
				dev = h.localDev(r.Gateway, "")
			}
			if r.Dst.Bits() == 0 || !r.Dst.Overlaps(e) || dev == def {
				continue
			}
			out = append(out, fmt.Sprintf("%s: route %s leaves through %s, not the default route's %s", e, r, orUnknown(dev), def))
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown device"
	}
	return s
}

// ClusterOverlaps says where the cluster's ranges (config's
// ClusterRanges) meet the host's addresses or routes: a pod or service
// range the host already uses for something else. Routes aks-flex-node
// owns do not count, nor the default route.
func ClusterOverlaps(ranges map[string]netip.Prefix, h HostNet, owned []Route) []string {
	keys := make([]string, 0, len(ranges))
	for k := range ranges {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		c := ranges[k]
		for _, a := range h.Addrs {
			if a.Dev != "lo" && a.Dev != BridgeName && a.Prefix.Masked().Overlaps(c) {
				out = append(out, fmt.Sprintf("%s %s overlaps %s on %s", k, c, a.Prefix, a.Dev))
			}
		}
		for _, r := range h.Routes {
			if r.Dst.Bits() == 0 || anySatisfies(r, owned) || !r.Dst.Overlaps(c) || r.Dev == BridgeName {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s overlaps the host's route %s", k, c, r))
		}
	}
	return out
}

// ExpectedCIDRs are hostRouting.routeOverlap.expectedCidrs, parsed (c is
// validated).
func ExpectedCIDRs(c *config.Config) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.HostRouting.RouteOverlap.ExpectedCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

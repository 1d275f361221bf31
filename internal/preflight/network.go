package preflight

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/network"
)

// The network checks read the host's IPv4 addresses and routes
// (Env.ReadHostNet); on an image tree under --root there are none to
// read, and they say they did not probe.

// hostNet reads the host's network once per check.
func (e *Env) hostNet(ctx context.Context) (network.HostNet, []network.Route, error) {
	if e.ReadHostNet != nil {
		return e.ReadHostNet(ctx)
	}
	if e.Root != "/" {
		return network.HostNet{}, nil, hostos.ErrLiveHostOnly
	}
	rs := network.Routes{}
	h, err := rs.ReadHostNet(ctx)
	if err != nil {
		return h, nil, err
	}
	owned, err := rs.Owned(ctx)
	return h, owned, err
}

// networkingOverlapCheck: the cluster's ranges are not the host's, and
// the sysctls start sets can be set.
func networkingOverlapCheck(e *Env) Check {
	c := e.Config
	return NewCheck(NameNetworkingOverlap, "networking.podCIDR, networking.serviceCIDR, ip_forward, bridge-nf-call-iptables", func(ctx context.Context) Result {
		h, owned, err := e.hostNet(ctx)
		if err != nil {
			return Warning(notProbedRemedy, "host addresses and routes not read: %v", err)
		}
		ranges := c.Networking.ClusterRanges()
		if problems := network.ClusterOverlaps(ranges, h, owned); len(problems) > 0 {
			return Error("choose pod and service ranges the host's networks do not use (networking.podCIDR, networking.serviceCIDR, and the cluster's own), or renumber the host",
				"%s", strings.Join(problems, "; "))
		}
		if msg := e.sysctlsSettable(); msg != "" {
			return Error("run on a host whose /proc/sys/net is writable by root (not a read-only container)", "%s", msg)
		}
		var names []string
		for _, k := range []string{"networking.podCIDR", "networking.serviceCIDR", "networking.dnsServiceIP"} {
			if p, ok := ranges[k]; ok {
				names = append(names, k+" "+p.String())
			}
		}
		pod := ""
		switch {
		case c.Networking.ClusterCNI():
			pod = "; networking.mode cluster: the cluster's CNI chooses the pod addresses"
		case c.Networking.PodCIDR == "":
			pod = "; the node's pod CIDR is not in the config: start takes the Node's spec.podCIDR once the node has registered (the controller manager must run with --allocate-node-cidrs; see " + NamePodCIDR + ")"
		}
		return OK("%s meet no host address or route; ip_forward and bridge netfilter settable%s", strings.Join(names, ", "), pod)
	})
}

// sysctlsSettable says which of the network sysctls start sets cannot be
// written; "" when all can. bridge-nf-call-iptables appears only once
// br_netfilter is loaded (start loads it; kernel-modules checks it is
// there), so its absence is no problem here.
func (e *Env) sysctlsSettable() string {
	pd := e.procDir()
	if pd == "" {
		return ""
	}
	var bad []string
	for _, key := range []string{"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"} {
		p := filepath.Join(pd, "sys", strings.ReplaceAll(key, ".", "/"))
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		switch {
		case err == nil:
			f.Close()
		case errors.Is(err, fs.ErrNotExist) && key != "net.ipv4.ip_forward":
		default:
			bad = append(bad, fmt.Sprintf("%s (%v)", key, err))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "cannot set " + strings.Join(bad, ", ")
}

// hostRoutesCheck: each static route can be installed as written.
func hostRoutesCheck(e *Env) Check {
	routes := network.StaticRoutes(e.Config)
	return NewCheck(NameHostRoutes, "hostRouting.staticRoutes", func(ctx context.Context) Result {
		if len(routes) == 0 {
			return OK("no static routes (hostRouting.staticRoutes is not enabled)")
		}
		h, _, err := e.hostNet(ctx)
		if err != nil {
			return Warning(notProbedRemedy, "host addresses not read: %v", err)
		}
		if problems := network.GatewayProblems(routes, h); len(problems) > 0 {
			return Error("give each route a gateway on a subnet of this host (of its dev, when one is named), or bring that interface up first",
				"hostRouting.staticRoutes: %s", strings.Join(problems, "; "))
		}
		return OK("%d static route(s) reachable; start adds them with proto %d", len(routes), network.RouteProtocol)
	})
}

// routeOverlapCheck: hostRouting.routeOverlap.expectedCidrs route
// through the default route's device; STRICT makes a miss an error.
func routeOverlapCheck(e *Env) Check {
	c := e.Config
	expected := network.ExpectedCIDRs(c)
	return NewCheck(NameRouteOverlap, "hostRouting.routeOverlap", func(ctx context.Context) Result {
		if len(expected) == 0 {
			return OK("no expected CIDRs (hostRouting.routeOverlap.expectedCidrs)")
		}
		h, _, err := e.hostNet(ctx)
		if err != nil {
			return Warning(notProbedRemedy, "host routes not read: %v", err)
		}
		problems := network.RouteOverlaps(expected, network.StaticRoutes(c), h)
		if len(problems) == 0 {
			return OK("%d expected CIDR(s) route through %s, the default route's interface", len(expected), h.DefaultDev())
		}
		remedy := "remove or narrow the routes that take these CIDRs elsewhere (or fix hostRouting.routeOverlap.expectedCidrs)"
		if c.HostRouting.RouteOverlap.Mode == config.RouteOverlapStrict {
			return Error(remedy, "hostRouting.routeOverlap (STRICT): %s", strings.Join(problems, "; "))
		}
		return Warning(remedy, "hostRouting.routeOverlap (WARN): %s", strings.Join(problems, "; "))
	})
}

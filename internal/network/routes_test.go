package network

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

// fakeIP is a host's main table as ip(8) shows and changes it: routes
// with their protocol.
type fakeIP struct {
	routes []fakeRoute
	calls  []string
}

type fakeRoute struct {
	r     Route
	proto string
}

func (f *fakeIP) run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	a := strings.Join(args, " ")
	switch {
	case strings.HasPrefix(a, "-4 -j route show table main proto "):
		want := strings.TrimPrefix(a, "-4 -j route show table main proto ")
		var parts []string
		for _, fr := range f.routes {
			if fr.proto == want {
				parts = append(parts, routeJSON(fr.r))
			}
		}
		return []byte("[" + strings.Join(parts, ",") + "]"), nil
	case strings.HasPrefix(a, "-4 route add "):
		r := parseArgs(args[3:])
		for _, fr := range f.routes {
			if fr.r.Dst == r.Dst && fr.r.Metric == r.Metric {
				return nil, errors.New("RTNETLINK answers: File exists")
			}
		}
		f.routes = append(f.routes, fakeRoute{r: r, proto: args[len(args)-1]})
		return nil, nil
	case strings.HasPrefix(a, "-4 route del "):
		r := parseArgs(args[3:])
		for i, fr := range f.routes {
			if fr.r == r && fr.proto == args[len(args)-1] {
				f.routes = append(f.routes[:i], f.routes[i+1:]...)
				return nil, nil
			}
		}
		return nil, errors.New("RTNETLINK answers: No such process")
	}
	return nil, errors.New("unexpected: ip " + a)
}

func routeJSON(r Route) string {
	s := `{"dst":"` + r.Dst.String() + `"`
	if r.Gateway.IsValid() {
		s += `,"gateway":"` + r.Gateway.String() + `"`
	}
	dev := r.Dev
	if dev == "" {
		dev = "eth1"
	}
	s += `,"dev":"` + dev + `"`
	if r.Metric != 0 {
		s += `,"metric":` + strconv.FormatUint(uint64(r.Metric), 10)
	}
	return s + `,"protocol":"217","flags":[]}`
}

// parseArgs reads "DST [via GW] [dev DEV] metric M proto P".
func parseArgs(a []string) Route {
	r := Route{Dst: netip.MustParsePrefix(a[0])}
	for i := 1; i+1 < len(a); i += 2 {
		switch a[i] {
		case "via":
			r.Gateway = netip.MustParseAddr(a[i+1])
		case "dev":
			r.Dev = a[i+1]
		case "metric":
			m, _ := strconv.ParseUint(a[i+1], 10, 32)
			r.Metric = uint32(m)
		}
	}
	if r.Dev == "" {
		r.Dev = "eth1" // the kernel's choice for the gateway
	}
	return r
}

func cfgRoutes(enabled bool, rs ...config.StaticRoute) *config.Config {
	c := &config.Config{}
	c.HostRouting.StaticRoutes = config.StaticRoutes{Enabled: enabled, Routes: rs}
	return c
}

func TestApplyIsIdempotentAndOwnsOnlyItsRoutes(t *testing.T) {
	foreign := fakeRoute{r: Route{Dst: netip.MustParsePrefix("10.9.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1"), Dev: "eth1"}, proto: "static"}
	f := &fakeIP{routes: []fakeRoute{foreign}}
	rs := Routes{Run: f.run}
	ctx := context.Background()
	want := StaticRoutes(cfgRoutes(true,
		config.StaticRoute{Destination: "10.30.0.0/16", Gateway: "192.168.10.1", Metric: 100},
		config.StaticRoute{Destination: "10.31.0.0/16", Gateway: "192.168.10.1", Dev: "eth1"}))
	changed, err := rs.Apply(ctx, want)
	if err != nil || !changed || len(f.routes) != 3 {
		t.Fatalf("first apply: changed %v, err %v, routes %v", changed, err, f.routes)
	}
	f.calls = nil
	changed, err = rs.Apply(ctx, want)
	if err != nil || changed || len(f.calls) != 1 {
		t.Fatalf("second apply must only look: changed %v, err %v, calls %q", changed, err, f.calls)
	}
	// The config drops a route and changes another's metric: the owned
	// routes follow, the foreign one stays.
	want2 := StaticRoutes(cfgRoutes(true, config.StaticRoute{Destination: "10.30.0.0/16", Gateway: "192.168.10.1", Metric: 200}))
	if changed, err = rs.Apply(ctx, want2); err != nil || !changed {
		t.Fatalf("changed apply: %v %v", changed, err)
	}
	if len(f.routes) != 2 || f.routes[0] != foreign || f.routes[1].r.Metric != 200 || f.routes[1].proto != "217" {
		t.Fatalf("routes after the change: %v", f.routes)
	}
	// Disabled: every owned route goes, the foreign one stays.
	if changed, err = rs.Apply(ctx, StaticRoutes(cfgRoutes(false, config.StaticRoute{Destination: "10.30.0.0/16", Gateway: "192.168.10.1"}))); err != nil || !changed {
		t.Fatalf("disabled apply: %v %v", changed, err)
	}
	if len(f.routes) != 1 || f.routes[0] != foreign {
		t.Fatalf("routes after disabling: %v", f.routes)
	}
	if changed, err = rs.RemoveAll(ctx); err != nil || changed {
		t.Fatalf("remove with nothing owned: %v %v", changed, err)
	}
}

// A foreign route in the way is never replaced: the add fails and says so.
func TestApplyRefusesToReplaceAForeignRoute(t *testing.T) {
	f := &fakeIP{routes: []fakeRoute{{r: Route{Dst: netip.MustParsePrefix("10.30.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.9"), Dev: "eth1"}, proto: "static"}}}
	_, err := Routes{Run: f.run}.Apply(context.Background(), []Route{{Dst: netip.MustParsePrefix("10.30.0.0/16"), Gateway: netip.MustParseAddr("192.168.10.1")}})
	if err == nil || !strings.Contains(err.Error(), "does not own") || f.routes[0].r.Gateway.String() != "192.168.10.9" {
		t.Fatalf("got %v, routes %v", err, f.routes)
	}
}

func TestParseRoutes(t *testing.T) {
	out := `[{"dst":"default","gateway":"10.1.0.1","dev":"eth0","protocol":"dhcp","metric":100,"flags":[]},
	{"dst":"10.1.0.0/24","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"10.1.0.4","flags":[]},
	{"type":"unreachable","dst":"10.66.0.0/16","flags":[]},
	{"dst":"10.1.0.9","gateway":"10.1.0.1","dev":"eth0","flags":[]}]`
	rs, err := parseRoutes([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Dst.String() != "0.0.0.0/0" || rs[0].Metric != 100 || rs[1].Gateway.IsValid() || rs[2].Dst.String() != "10.1.0.9/32" {
		t.Fatalf("%v", rs)
	}
	if _, err := parseRoutes([]byte("not json")); err == nil {
		t.Fatal("want an error")
	}
}

package netlab

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Bridge is a network of several test hosts, all of it in namespaces the
// test made: the link's namespace is a router with a bridge (fleet0)
// that every host's namespace is wired to by a veth; the link's other
// end, on this machine, is where the control plane listens. The hosts
// reach each other through the bridge and the control plane through the
// router; they have no route anywhere else. The bridge subnet is the
// upper half of the link's 10.250.<n>.0/24, which the link reserves.
type Bridge struct {
	Link  *Link
	Hosts []BridgeHost
}

// BridgeHost is one host's namespace and its address on the bridge.
type BridgeHost struct {
	NS, IP string
}

// NewBridge makes the router, the bridge and n host namespaces;
// everything goes when t ends (the host namespaces, and the link with the
// route to the bridge subnet on this machine).
func NewBridge(t testing.TB, n int) *Bridge {
	t.Helper()
	b := &Bridge{Link: New(t)}
	l := b.Link
	router := nsName(l.NS)
	gw := fmt.Sprintf("10.250.%d.129", l.N)
	subnet := fmt.Sprintf("10.250.%d.128/25", l.N)
	ipCmd(t, "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	ipCmd(t, "-n", router, "link", "add", "fleet0", "type", "bridge")
	ipCmd(t, "-n", router, "addr", "add", gw+"/25", "dev", "fleet0")
	ipCmd(t, "-n", router, "link", "set", "fleet0", "up")
	// Replies from the control plane to the hosts; the route goes with the
	// link's veth.
	ipCmd(t, "route", "add", subnet, "via", l.Inner, "dev", fmt.Sprintf("afnv%d", l.N))
	for i := 1; i <= n; i++ {
		h := BridgeHost{NS: fmt.Sprintf("/run/netns/afn-%d-h%d", l.N, i), IP: fmt.Sprintf("10.250.%d.%d", l.N, 129+i)}
		name, port := nsName(h.NS), fmt.Sprintf("fleet%d", i)
		// Left by a run killed before its cleanup: the link's lock is
		// ours, so they are too.
		_ = exec.Command("ip", "netns", "del", name).Run()
		ipCmd(t, "netns", "add", name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		ipCmd(t, "-n", router, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name)
		ipCmd(t, "-n", router, "link", "set", port, "master", "fleet0", "up")
		ipCmd(t, "-n", name, "addr", "add", h.IP+"/25", "dev", "eth0")
		ipCmd(t, "-n", name, "link", "set", "eth0", "up")
		ipCmd(t, "-n", name, "link", "set", "lo", "up")
		ipCmd(t, "-n", name, "route", "add", l.Outer+"/32", "via", gw)
		b.Hosts = append(b.Hosts, h)
	}
	return b
}

func nsName(path string) string { return path[strings.LastIndex(path, "/")+1:] }

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("netlab: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

package aclhost

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Peer is a network namespace the test makes and joins to a host by a
// veth pair: where a test serves something at a non-loopback address (an
// RFC 1918 one) that only the host can reach. Nothing on the build
// machine's own network changes; both ends live in namespaces the test
// made (the host's is nspawn's private one).
type Peer struct {
	// NS is the namespace's path, for ListenInNetNS.
	NS string
	// Addr is the peer's address, HostAddr the host's end of the pair.
	Addr, HostAddr string
}

// Peer makes a namespace with lo and one end of a veth pair at peerCIDR,
// moves the other end into h's network namespace at hostCIDR, and removes
// it all when tb ends. The CIDRs share a subnet (10.213.0.1/30 and
// 10.213.0.2/30).
func (h *Host) Peer(tb testing.TB, peerCIDR, hostCIDR string) *Peer {
	tb.Helper()
	peerIP, _, err := net.ParseCIDR(peerCIDR)
	if err != nil {
		tb.Fatalf("aclhost: peer: %v", err)
	}
	hostIP, _, err := net.ParseCIDR(hostCIDR)
	if err != nil {
		tb.Fatalf("aclhost: peer: %v", err)
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		tb.Fatal(err)
	}
	name := "afn-peer-" + hex.EncodeToString(suffix[:])
	run := func(args ...string) {
		tb.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			tb.Fatalf("aclhost: peer: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", name)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	leader := strconv.Itoa(h.leader)
	run("ip", "-n", name, "link", "add", "afnp0", "type", "veth", "peer", "name", "afnp1")
	run("ip", "-n", name, "link", "set", "afnp1", "netns", leader)
	run("ip", "-n", name, "addr", "add", peerCIDR, "dev", "afnp0")
	run("ip", "-n", name, "link", "set", "afnp0", "up")
	run("ip", "-n", name, "link", "set", "lo", "up")
	run("nsenter", "-t", leader, "-n", "ip", "addr", "add", hostCIDR, "dev", "afnp1")
	run("nsenter", "-t", leader, "-n", "ip", "link", "set", "afnp1", "up")
	return &Peer{NS: "/run/netns/" + name, Addr: peerIP.String(), HostAddr: hostIP.String()}
}

// Listen opens a TCP listener on the peer's address (port "0" picks one),
// served by the test process.
func (p *Peer) Listen(port string) (net.Listener, error) {
	l, err := ListenInNetNS(p.NS, net.JoinHostPort(p.Addr, port))
	if err != nil {
		return nil, fmt.Errorf("aclhost: listen in peer %s: %w", p.NS, err)
	}
	return l, nil
}

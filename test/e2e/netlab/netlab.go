// Package netlab gives each end-to-end test its own private link: a network
// namespace for the test host and a veth pair whose other end, on this
// machine, is where the test's control plane listens. Links are numbered and
// each number is held by an exclusive lock for as long as the test runs, so
// tests in different packages (go test runs packages in parallel) and
// different go test processes never share an address or an interface name.
// Traffic only ever goes between the two ends of one pair.
package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// maxLinks bounds how many links may exist at once; each is a /30 in
// 10.250.<n>.0/24, a range no test config points anywhere else.
const maxLinks = 64

// lockDir holds one lock file per link number. /run is a tmpfs, so a
// machine restart clears stale files; the flocks die with their process.
const lockDir = "/run/aks-flex-node-test/netlab"

// Link is one allocated namespace and veth pair.
type Link struct {
	// N is the link number; it names the namespace, the veth and the subnet.
	N int
	// NS is the path of the host's network namespace (for nspawn
	// --network-namespace-path).
	NS string
	// Outer is this machine's end of the veth: where the control plane
	// listens. Inner is the test host's end: its node IP.
	Outer, Inner string
}

// New allocates a link, creates it, and removes it (and releases the
// number) when t ends.
func New(t testing.TB) *Link {
	t.Helper()
	n, lock, err := claim()
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	t.Cleanup(func() { _ = lock.Close() })
	l := &Link{
		N:     n,
		NS:    fmt.Sprintf("/run/netns/afn-%d", n),
		Outer: fmt.Sprintf("10.250.%d.1", n),
		Inner: fmt.Sprintf("10.250.%d.2", n),
	}
	name, veth := filepath.Base(l.NS), fmt.Sprintf("afnv%d", n)
	// A previous run killed before its cleanup may have left these behind;
	// holding the lock means nobody else owns them now.
	_ = exec.Command("ip", "netns", "del", name).Run()
	_ = exec.Command("ip", "link", "del", veth).Run()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("netlab: ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run("link", "add", veth, "type", "veth", "peer", "name", veth+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	run("link", "set", veth+"p", "netns", name)
	run("addr", "add", l.Outer+"/30", "dev", veth)
	run("link", "set", veth, "up")
	run("-n", name, "addr", "add", l.Inner+"/30", "dev", veth+"p")
	run("-n", name, "link", "set", veth+"p", "up")
	run("-n", name, "link", "set", "lo", "up")
	return l
}

// InnerDev is the test host's end of the veth, in its namespace.
func (l *Link) InnerDev() string { return fmt.Sprintf("afnv%dp", l.N) }

// claim takes the lowest free link number and returns its held lock.
func claim() (int, *os.File, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return 0, nil, err
	}
	for n := 0; n < maxLinks; n++ {
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return 0, nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return n, f, nil
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return 0, nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
	return 0, nil, fmt.Errorf("all %d links under %s are in use", maxLinks, lockDir)
}

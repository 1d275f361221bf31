// Package netns runs one test inside a network namespace of its own that
// has only lo, with the addresses the test asks for on lo: how a unit test
// puts a server on an RFC 1918 address when no route off the machine
// exists, so nothing it does can reach a real network.
package netns

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

const envInside = "AKS_FLEX_NODE_TEST_NETNS"

// Enter re-runs test t (a top-level test) in a new network namespace
// (unshare --net) with lo up and addrs (CIDRs such as 10.213.0.1/32) on
// it, and reports the child's result as t's. It returns true in the child,
// where the test body then runs, and false in the parent, which must
// return. It needs root and AKS_FLEX_NODE_E2E=1; the test skips otherwise.
func Enter(t *testing.T, addrs ...string) bool {
	t.Helper()
	if os.Getenv(envInside) == t.Name() {
		onlyLoopback(t)
		return true
	}
	if os.Getenv("AKS_FLEX_NODE_E2E") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root and AKS_FLEX_NODE_E2E=1: runs in a network namespace of its own")
	}
	script := "set -e; ip link set lo up"
	for _, a := range addrs {
		if _, _, err := net.ParseCIDR(a); err != nil {
			t.Fatalf("netns: %v", err)
		}
		script += "; ip addr add " + a + " dev lo"
	}
	script += `; exec "$0" "$@"`
	args := []string{"--net", "--", "sh", "-c", script, os.Args[0],
		"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v"}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), envInside+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace with lo and %s:\n%s", strings.Join(addrs, ", "), out)
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("netns: %s did not pass in the namespace", t.Name())
	}
	return false
}

// onlyLoopback fails the test unless lo is the namespace's only link.
func onlyLoopback(t *testing.T) {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			t.Fatal(fmt.Sprintf("netns: link %s exists here: not a private namespace", i.Name))
		}
	}
}

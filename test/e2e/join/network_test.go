package join

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/netsnap"
)

// The ACL scenario's host carries one hostRouting static route: a
// documentation range (TEST-NET-2) through the control plane's end of the
// test's link, on the host's end of it. Nothing is sent there; the test
// only looks at the route.
const staticRouteDst = "198.51.100.0/24"

// hostRouting is the scenario's hostRouting section: one route for the
// ACL host, none for the others.
func (e *env) hostRouting(sc scenario) map[string]any {
	if sc.name != "acl" {
		return nil
	}
	return map[string]any{
		"staticRoutes": map[string]any{"enabled": true, "routes": []any{map[string]any{
			"destination": staticRouteDst, "gateway": e.net.Outer, "dev": e.net.InnerDev(), "metric": 50,
		}}},
	}
}

// ownedRoute is the static route as the host has it, marked with the
// product's protocol number; "" when it is not there.
func ownedRoute(t *testing.T, h *aclhost.Host) string {
	t.Helper()
	return strings.TrimSpace(h.RunOK(t, "ip", "-4", "route", "show", staticRouteDst, "proto", fmt.Sprint(network.RouteProtocol)))
}

// checkStaticRoute: start installed the route, through the gateway and
// device the config names, marked as the product's.
func (e *env) checkStaticRoute(t *testing.T, h *aclhost.Host, sc scenario) {
	if sc.name != "acl" {
		return
	}
	got := ownedRoute(t, h)
	if !strings.Contains(got, "via "+e.net.Outer) || !strings.Contains(got, "dev "+e.net.InnerDev()) || !strings.Contains(got, "metric 50") {
		t.Errorf("static route after start: %q, want %s via %s dev %s metric 50 proto %d", got, staticRouteDst, e.net.Outer, e.net.InnerDev(), network.RouteProtocol)
	}
}

// dropStaticRoute deletes the route before a power cut. The test host's
// network namespace belongs to the test and outlives the host's power
// cycle, which a real host's kernel state does not: deleting the route
// first is what a real reboot does to it.
func dropStaticRoute(t *testing.T, h *aclhost.Host, sc scenario) {
	if sc.name == "acl" {
		h.RunOK(t, "ip", "-4", "route", "del", staticRouteDst, "proto", fmt.Sprint(network.RouteProtocol))
	}
}

// checkStaticRouteBack: after the reboot the agent put the route back.
func (e *env) checkStaticRouteBack(t *testing.T, h *aclhost.Host, sc scenario) {
	if sc.name != "acl" {
		return
	}
	begin := time.Now()
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return ownedRoute(t, h) != "", nil
	})
	t.Logf("BENCH static-route-back-after-pod-running=%v", time.Since(begin).Round(time.Millisecond))
	// Nothing but the agent's own loops changes the node after a reboot:
	// neither may cost the other its pass (the machine a minute late).
	if j := h.RunOK(t, "journalctl", "--no-pager", "-b", "-u", "aks-flex-node-agent.service"); strings.Contains(j, "skipped this pass") {
		t.Errorf("an agent loop skipped its pass after the reboot:\n%s", j)
	}
	if err != nil {
		j, _, _ := h.Run(e.ctx, "journalctl", "--no-pager", "-b", "-u", "aks-flex-node-agent.service")
		t.Errorf("the agent did not put the static route back after the reboot: %v\nagent:\n%s", err, j)
	}
}

// checkResetAndUninstallLeaveNothing: reset (twice: it is safe to repeat),
// then uninstall.sh, leave the trees as they were before install.
func checkResetAndUninstallLeaveNothing(t *testing.T, h *aclhost.Host, sc scenario, before aclhost.Tree, netBefore netsnap.State) {
	begin := time.Now()
	h.RunOK(t, sc.agent, "reset")
	t.Logf("BENCH scenario=%s reset=%v", sc.name, time.Since(begin).Round(time.Millisecond))
	// Reset removed the route, the bridge and the netfilter state the
	// node made, and nothing else: the host's network is as before join.
	if d := netsnap.Diff(netBefore, netsnap.Take(t, h)); len(d) > 0 {
		t.Errorf("reset left the host's network changed:\n%s", strings.Join(d, "\n"))
	}
	h.RunOK(t, sc.agent, "reset")
	h.RunOK(t, "/root/dist/uninstall.sh")
	after, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("reset + uninstall left changes:\n%s", strings.Join(d, "\n"))
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podNetOf is what a Node object must never change on a host: every
// route (all tables) and the agent's masquerade table, less what the
// canary Node (a good one, canaryCIDR) adds: its route and its place among
// the pod networks the masquerade spares.
func podNetOf(ctx context.Context, m *member, canaryCIDR string) (state string, canary bool, err error) {
	out, _, err := m.h.Run(ctx, "ip", "-j", "route", "show", "table", "all")
	if err != nil {
		return "", false, err
	}
	var routes []map[string]any
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return "", false, fmt.Errorf("%w: %s", err, out)
	}
	var kept []map[string]any
	for _, r := range routes {
		if r["dst"] == canaryCIDR {
			canary = true
			continue
		}
		kept = append(kept, r)
	}
	b, _ := json.Marshal(kept)
	masq, _, err := m.h.Run(ctx, "nft", "list", "table", "ip", "aks_flex_node")
	if err != nil {
		return "", false, err
	}
	return string(b) + "\n" + strings.ReplaceAll(masq, canaryCIDR+", ", ""), canary, nil
}

// hostileNode is a Node an admin (or anyone who may write Nodes) makes to
// take over the hosts' routing.
type hostileNode struct{ name, podCIDR, internalIP string }

// checkHostileNodes is issue 26's item 2 end to end: with the fleet
// joined, an admin creates Nodes whose pod CIDRs are half of IPv4
// (128.0.0.0/1) and the metadata endpoint (169.254.169.254/32), both via
// an address on the hosts' own subnet, and one inside the cluster's pod
// range whose InternalIP is on no subnet of the hosts; the InternalIPs
// are patched in through the status, as a kubelet reports them. Then a
// good canary Node: once each host routes to it, its agent has acted on
// the hostile ones too (it follows the Nodes in order). Every host's agent
// refuses each hostile Node (a Warning Event on the host's Node names it;
// its journal too), and not one route or masquerade rule on any host
// changes beyond the canary's; with all four deleted, each host is exactly
// as before.
func (f *fleet) checkHostileNodes(t *testing.T) {
	canary := hostileNode{"canary", "10.244.201.0/24", fmt.Sprintf("10.250.%d.202", f.lab.link.N)}
	// The hosts as their agents keep them: an agent that started with
	// the last join writes its masquerade table at its first pass, which
	// can come a moment after the fleet is Ready.
	before := map[string]string{}
	poll(t, f.ctx, 2*time.Minute, "each host's agent has written its routes and masquerade", func() string {
		for _, m := range f.members {
			s, _, err := podNetOf(f.ctx, m, canary.podCIDR)
			if err != nil {
				return m.name + ": " + err.Error()
			}
			before[m.name] = s
		}
		return ""
	})
	hostile := []hostileNode{
		{"hostile-half", "128.0.0.0/1", fmt.Sprintf("10.250.%d.200", f.lab.link.N)},
		{"hostile-metadata", "169.254.169.254/32", fmt.Sprintf("10.250.%d.201", f.lab.link.N)},
		// TEST-NET-3: only ever a would-be next hop, never sent to.
		{"hostile-off-subnet", "10.244.200.0/24", "203.0.113.9"},
	}
	nodes := f.cp.Client.CoreV1().Nodes()
	defer func() {
		for _, h := range append(hostile, canary) {
			_ = nodes.Delete(context.Background(), h.name, metav1.DeleteOptions{})
		}
	}()
	for _, h := range append(hostile, canary) {
		f.createNode(t, h)
	}
	begin := time.Now()
	poll(t, f.ctx, 2*time.Minute, "each host's agent routes the canary and refuses each hostile Node", func() string {
		for _, m := range f.members {
			s, routed, err := podNetOf(f.ctx, m, canary.podCIDR)
			if err != nil {
				return err.Error()
			}
			if s != before[m.name] {
				t.Fatalf("%s: a hostile Node changed the host's routes or masquerade:\nbefore:\n%s\nafter:\n%s", m.name, before[m.name], s)
			}
			if !routed {
				return m.name + ": no route to the canary yet"
			}
		}
		return f.missingRefusals(hostile)
	})
	t.Logf("BENCH fleet hostile-nodes-refused-by-all=%v", time.Since(begin).Round(time.Millisecond))
	for _, m := range f.members {
		checkRefusalsLogged(t, f.ctx, m, hostile)
	}
	for _, h := range append(hostile, canary) {
		if err := nodes.Delete(f.ctx, h.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitRoutes(t, f.members)
	for _, m := range f.members {
		if s, routed, err := podNetOf(f.ctx, m, canary.podCIDR); err != nil || routed || s != before[m.name] {
			t.Fatalf("%s: after the Nodes went (canary routed %v): %v\nbefore:\n%s\nafter:\n%s", m.name, routed, err, before[m.name], s)
		}
	}
}

// createNode creates h's Node with its pod CIDR, then patches its
// InternalIP in through the status (a merge patch: the controller manager
// writes a new Node at once too, and an update would conflict with it).
func (f *fleet) createNode(t *testing.T, h hostileNode) {
	nodes := f.cp.Client.CoreV1().Nodes()
	if _, err := nodes.Create(f.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.name},
		Spec: corev1.NodeSpec{PodCIDR: h.podCIDR, PodCIDRs: []string{h.podCIDR}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}]}}`, h.internalIP)
	if _, err := nodes.Patch(f.ctx, h.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// checkRefusalsLogged: m's agent named each hostile Node in a log line.
func checkRefusalsLogged(t *testing.T, ctx context.Context, m *member, hostile []hostileNode) {
	out, _, err := m.h.Run(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "aks-flex-node-agent")
	if err != nil {
		t.Fatal(err)
	}
	var refusals []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "refused a Node") {
			refusals = append(refusals, line)
		}
	}
	for _, h := range hostile {
		if !strings.Contains(strings.Join(refusals, ""), "node="+h.name+" ") {
			t.Errorf("%s: no log line names refused Node %s:\n%s", m.name, h.name, strings.Join(refusals, ""))
		}
	}
}

// missingRefusals names the (host, hostile Node) pairs no PodCIDRRefused
// Event on the host's Node names yet; "" when there are none.
func (f *fleet) missingRefusals(hostile []hostileNode) string {
	evs, err := f.cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var missing []string
	for _, m := range f.members {
		for _, h := range hostile {
			found := false
			for _, e := range evs.Items {
				found = found || (e.Reason == "PodCIDRRefused" && e.InvolvedObject.Name == m.name && strings.Contains(e.Message, "Node "+h.name+" refused"))
			}
			if !found {
				missing = append(missing, m.name+"/"+h.name)
			}
		}
	}
	if len(missing) > 0 {
		return "no PodCIDRRefused Event for " + strings.Join(missing, ", ")
	}
	return ""
}

package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podNetOf is what a Node object must never change on a host: every
// route (all tables) and the agent's masquerade table.
func podNetOf(ctx context.Context, m *member) (string, error) {
	routes, _, err := m.h.Run(ctx, "ip", "-j", "route", "show", "table", "all")
	if err != nil {
		return "", err
	}
	masq, _, err := m.h.Run(ctx, "nft", "list", "table", "ip", "aks_flex_node")
	if err != nil {
		return "", err
	}
	return routes + "\n" + masq, nil
}

// hostileNode is a Node an admin (or anyone who may write Nodes) makes to
// take over the hosts' routing.
type hostileNode struct{ name, podCIDR, internalIP string }

// checkHostileNodes is issue 26's item 2 end to end: with the fleet
// joined, an admin creates Nodes whose pod CIDRs are half of IPv4
// (128.0.0.0/1) and the metadata endpoint (169.254.169.254/32), both via
// an address on the hosts' own subnet, and one inside the cluster's pod
// range whose InternalIP is on no subnet of the hosts; the InternalIPs
// are patched in as the kubelet reports them, through the status. Every
// host's agent refuses each (its Warning Event on the host's Node names
// the hostile Node; its journal too), and not one route or masquerade rule
// on any host changes meanwhile.
func (f *fleet) checkHostileNodes(t *testing.T) {
	before := map[string]string{}
	for _, m := range f.members {
		s, err := podNetOf(f.ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		before[m.name] = s
	}
	hostile := []hostileNode{
		{"hostile-half", "128.0.0.0/1", fmt.Sprintf("10.250.%d.200", f.lab.link.N)},
		{"hostile-metadata", "169.254.169.254/32", fmt.Sprintf("10.250.%d.201", f.lab.link.N)},
		// TEST-NET-3: only ever a would-be next hop, never sent to.
		{"hostile-off-subnet", "10.244.200.0/24", "203.0.113.9"},
	}
	nodes := f.cp.Client.CoreV1().Nodes()
	for _, h := range hostile {
		if _, err := nodes.Create(f.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.name},
			Spec: corev1.NodeSpec{PodCIDR: h.podCIDR, PodCIDRs: []string{h.podCIDR}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A merge patch of the status: the controller manager writes the
		// new Node at once too, and an update would conflict with it.
		patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}]}}`, h.internalIP)
		if _, err := nodes.Patch(f.ctx, h.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, h := range hostile {
			_ = nodes.Delete(context.Background(), h.name, metav1.DeleteOptions{})
		}
	}()
	begin := time.Now()
	poll(t, f.ctx, 2*time.Minute, "each host's agent refuses each hostile Node", func() string {
		for _, m := range f.members {
			s, err := podNetOf(f.ctx, m)
			if err != nil {
				return err.Error()
			}
			if s != before[m.name] {
				t.Fatalf("%s: a hostile Node changed the host's routes or masquerade:\nbefore:\n%s\nafter:\n%s", m.name, before[m.name], s)
			}
		}
		return f.missingRefusals(hostile)
	})
	t.Logf("BENCH fleet hostile-nodes-refused-by-all=%v", time.Since(begin).Round(time.Millisecond))
	for _, m := range f.members {
		out, _, err := m.h.Run(f.ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "aks-flex-node-agent")
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
	// Deleting them changes nothing either.
	for _, h := range hostile {
		if err := nodes.Delete(f.ctx, h.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitRoutes(t, f.members)
	for _, m := range f.members {
		if s, err := podNetOf(f.ctx, m); err != nil || s != before[m.name] {
			t.Fatalf("%s: after the hostile Nodes went: %v\nbefore:\n%s\nafter:\n%s", m.name, err, before[m.name], s)
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

package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

// proxyNetworking is a host's networking config: the bundle's CNI
// version, and the agent's kube-proxy in the spec's mode.
func proxyNetworking(s spec, cniVersion string) map[string]any {
	n := map[string]any{"cniVersion": cniVersion, "kubeProxy": "agent", "clusterPodCIDR": controlplane.PodCIDR}
	if s.proxyMode != "" {
		n["kubeProxyMode"] = s.proxyMode
	}
	return n
}

// checkServices: each host runs the agent's kube-proxy in its mode (the
// nftables host has kube-proxy's nft table, the others its KUBE-SERVICES
// chain in the nat table); for each node, a ClusterIP Service whose only endpoint is that
// node's web pod answers by its ClusterIP from the web pod on every other
// node.
func (f *fleet) checkServices(t *testing.T) {
	for _, m := range f.members {
		// The machine's processes are the host's to see.
		out, _, err := m.h.Run(f.ctx, "sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null | grep -x kube-proxy")
		if err != nil || strings.TrimSpace(out) == "" {
			t.Fatalf("%s: no kube-proxy runs: %q %v", m.name, out, err)
		}
	}
	pods := f.cp.Client.CoreV1().Pods("default")
	svcs := f.cp.Client.CoreV1().Services("default")
	ips := map[string]string{}
	created := map[string]time.Time{}
	for _, m := range f.members {
		label := fmt.Sprintf(`{"metadata":{"labels":{"fleet-web":%q}}}`, m.name)
		if _, err := pods.Patch(f.ctx, "web-"+m.name, types.MergePatchType, []byte(label), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		svc, err := svcs.Create(f.ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "svc-" + m.name},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: map[string]string{"fleet-web": m.name},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ips[m.name], created[m.name] = svc.Spec.ClusterIP, time.Now()
	}
	for _, m := range f.members {
		f.checkProxyRules(t, m)
	}
	for _, to := range f.members {
		for _, from := range f.members {
			if from == to {
				continue
			}
			url := "http://" + ips[to.name] + "/"
			var answer string
			var took time.Duration
			poll(t, f.ctx, 30*time.Second, fmt.Sprintf("web-%s -> Service svc-%s %s", from.name, to.name, url), func() string {
				b := time.Now()
				out, err := f.cp.Kubectl(f.ctx, nil, "exec", "web-"+from.name, "--", "timeout", "5", "wget", "-q", "-O-", url)
				took = time.Since(b)
				if answer = strings.TrimSpace(string(out)); err != nil || answer != to.name {
					return fmt.Sprintf("answer %q, %v", answer, err)
				}
				return ""
			})
			t.Logf("BENCH fleet service from=%s to=%s clusterIP=%s answer=%q request=%v since-service-created=%v",
				from.name, to.name, ips[to.name], answer, took.Round(time.Millisecond), time.Since(created[to.name]).Round(time.Millisecond))
		}
	}
	for _, m := range f.members {
		if err := svcs.Delete(f.ctx, "svc-"+m.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkProxyRules: m's kube-proxy programmed the Services in its mode.
// Both modes write nftables (iptables mode through the machine's
// iptables-nft), so nft on the host sees either, whatever the host's own
// iptables is.
func (f *fleet) checkProxyRules(t *testing.T, m *member) {
	cmd := []string{"nft", "list", "table", "ip", "nat"}
	want := "chain KUBE-SERVICES"
	if m.proxyMode == "nftables" {
		cmd, want = []string{"nft", "list", "table", "ip", "kube-proxy"}, "chain services"
	}
	poll(t, f.ctx, 30*time.Second, m.name+": kube-proxy's rules ("+strings.Join(cmd, " ")+")", func() string {
		out, _, err := m.h.Run(f.ctx, cmd...)
		if err != nil || !strings.Contains(out, want) {
			return fmt.Sprintf("no %q: %v", want, err)
		}
		return ""
	})
}

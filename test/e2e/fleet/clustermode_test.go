package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/ignitiontest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// standInSubnet is the pod range of the stand-in CNI's config: not the
// controller manager's (10.244.0.0/16), so a pod address from it proves
// the cluster's config, not the agent's, made the pod's network.
const standInSubnet = "10.99.0.0/24"

// TestClusterMode joins an ACL-like host in networking.mode cluster: the
// agent writes no CNI config, start ends with the Node registered and
// NotReady for want of one, and `status` says the node waits for the
// cluster's CNI. A stand-in CNI DaemonSet (placed by the real DaemonSet
// controller and scheduler, hostNetwork, tolerating the not-ready taint)
// copies a plugin into /opt/cni/bin and a conflist into /etc/cni/net.d of
// the machine through hostPath mounts, as real CNIs install themselves;
// the node turns Ready, status names the config, a pod gets its address
// from that config, and the agent programs no pod routes or masquerade.
func TestClusterMode(t *testing.T) {
	ignitiontest.Require(t)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := &fleet{ctx: ctx, labHosts: 1}
	f.setUp(t)
	s := spec{name: "cluster-acl", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node"}
	m := f.boot(t, s, f.lab.hosts[0])
	if err := m.h.WriteFile("/etc/aks-flex-node/config.json", clusterModeConfig(t, f.config(t, s, m.ip)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256Hex(t, f.dist+"/aks-flex-node"))
	stdout, stderr, err := m.h.Run(ctx, s.agent, "start", "--join-timeout", "3m")
	out := stdout + stderr
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	t.Logf("BENCH cluster-mode start=%v", time.Since(begin).Round(time.Millisecond))
	if !strings.Contains(out, "waits for the cluster's CNI (networking.mode cluster)") {
		t.Errorf("start does not say the node waits for the cluster's CNI:\n%s", out)
	}

	// Registered, NotReady for want of a network config, and status says
	// what is awaited.
	n, err := f.cp.Client.CoreV1().Nodes().Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("start ended without a Node: %v\n%s", err, out)
	}
	if msg, ready := readyCondition(n); ready || !strings.Contains(msg, "NetworkReady=false") {
		t.Fatalf("after start without the cluster's CNI: Ready %v (%s)", ready, msg)
	}
	st := m.h.RunOK(t, s.agent, "status")
	if !strings.Contains(st, "network:    cluster mode: waits for the cluster's CNI") {
		t.Fatalf("status before the cluster's CNI:\n%s", st)
	}
	checkNoPodNetworkFromAgent(t, m, "before the cluster's CNI")

	dsBegin := time.Now()
	if _, err := f.cp.Client.AppsV1().DaemonSets("kube-system").Create(ctx, standInCNI(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitReady(ctx, t, f.cp.Client, s.name, 2*time.Minute)
	t.Logf("BENCH cluster-mode ready-after-daemonset=%v", time.Since(dsBegin).Round(time.Millisecond))
	pods, err := f.cp.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=standin-cni"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != s.name {
		t.Fatalf("stand-in CNI pods: %v %v", err, pods)
	}
	st = m.h.RunOK(t, s.agent, "status")
	if !strings.Contains(st, "network:    cluster mode: the cluster's CNI config /etc/cni/net.d/10-standin.conflist in machine kube1") {
		t.Fatalf("status with the cluster's CNI:\n%s", st)
	}

	// A pod's network is the stand-in's: an address from its range.
	if _, err := f.cp.Client.CoreV1().Pods("default").Create(ctx, webPod(s.name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, 2*time.Minute, "pod web-"+s.name+" running with an address of "+standInSubnet, func() string {
		p, err := f.cp.Client.CoreV1().Pods("default").Get(ctx, "web-"+s.name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || !strings.HasPrefix(p.Status.PodIP, "10.99.0.") {
			return fmt.Sprintf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		}
		return ""
	})
	checkNoPodNetworkFromAgent(t, m, "with the cluster's CNI")
	f.members = []*member{m}
	f.deleteWebPods(t, m)
	t.Logf("BENCH cluster-mode total=%v", time.Since(begin).Round(time.Millisecond))
}

// clusterModeConfig is a bridge-mode fleet config set to networking.mode
// cluster, with the cluster's kube-proxy and no cluster pod range (the
// agent's kube-proxy needs the bridge, and the routes the range bounds
// are bridge mode's: config validate refuses both in cluster mode).
func clusterModeConfig(t *testing.T, data []byte) []byte {
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	n := cfg["networking"].(map[string]any)
	n["mode"] = "cluster"
	n["kubeProxy"] = "daemonset"
	delete(n, "kubeProxyMode")
	delete(n, "clusterPodCIDR") // the cluster's CNI routes the pods
	out, _ := json.MarshalIndent(cfg, "", "  ")
	return out
}

func readyCondition(n *corev1.Node) (string, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Message, c.Status == corev1.ConditionTrue
		}
	}
	return "no Ready condition", false
}

// checkNoPodNetworkFromAgent: in cluster mode the agent owns no pod
// route (protocol 217, metric 217) and no masquerade table.
func checkNoPodNetworkFromAgent(t *testing.T, m *member, when string) {
	t.Helper()
	routes, err := podRoutes(t.Context(), m)
	if err != nil || len(routes) > 0 {
		t.Errorf("%s: pod routes from the agent: %q %v", when, routes, err)
	}
	if out, _, err := m.h.Run(t.Context(), "nft", "list", "table", "ip", "aks_flex_node"); err == nil {
		t.Errorf("%s: the agent's masquerade table exists:\n%s", when, out)
	}
}

// standInCNI is a DaemonSet that installs a CNI as real ones do: its pod
// runs on the host network, tolerates every taint (a node without a
// network is not ready), and copies a plugin binary (the bundle's
// bridge, renamed) into /opt/cni/bin and then its conflist into
// /etc/cni/net.d through hostPath mounts, each by rename so containerd
// never reads half a file; then it stays.
func standInCNI() *appsv1.DaemonSet {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"standin","plugins":[{"type":"standin-bridge","bridge":"standin0","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"%s"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`, standInSubnet)
	script := "set -e; cp /host/opt/cni/bin/bridge /host/opt/cni/bin/.standin-bridge; mv /host/opt/cni/bin/.standin-bridge /host/opt/cni/bin/standin-bridge; " +
		"printf '%s\\n' '" + conf + "' > /host/etc/cni/net.d/.10-standin.conflist; mv /host/etc/cni/net.d/.10-standin.conflist /host/etc/cni/net.d/10-standin.conflist; " +
		"trap 'exit 0' TERM; sleep 2147483647 & wait"
	labels := map[string]string{"app": "standin-cni"}
	dir := corev1.HostPathDirectory
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "standin-cni", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true,
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "install", Image: fixtures.BusyboxImageRef, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", script},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "cni-bin", MountPath: "/host/opt/cni/bin"},
							{Name: "cni-net", MountPath: "/host/etc/cni/net.d"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "cni-bin", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/opt/cni/bin", Type: &dir}}},
						{Name: "cni-net", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/cni/net.d", Type: &dir}}},
					},
				},
			},
		},
	}
}

package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/netsnap"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// netState and snapshotNet are the shared before/after comparison.
type netState = netsnap.State

func snapshotNet(t *testing.T, h *aclhost.Host) netState { return netsnap.Take(t, h) }

func sha256Hex(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// poll runs cond every 200ms until it returns "" or timeout passes, and
// fails t with its last answer then.
func poll(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() string) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		last := cond()
		if last == "" {
			return time.Since(begin)
		}
		if time.Since(begin) > timeout {
			t.Fatalf("%s: not after %v: %s", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v: %s", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkPodCIDRs: the controller manager gave each Node a pod CIDR of its
// own.
func (f *fleet) checkPodCIDRs(t *testing.T) {
	seen := map[string]string{}
	for _, m := range f.members {
		n, err := f.cp.Client.CoreV1().Nodes().Get(f.ctx, m.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.podCIDR = n.Spec.PodCIDR
		if m.podCIDR == "" || seen[m.podCIDR] != "" {
			t.Fatalf("Node %s pod CIDR %q (already %q's)", m.name, m.podCIDR, seen[m.podCIDR])
		}
		seen[m.podCIDR] = m.name
		t.Logf("%s: pod CIDR %s, InternalIP %s", m.name, m.podCIDR, m.ip)
	}
}

// podRoutes are the routes to other nodes' pod CIDRs on m: owned
// (protocol 217) with the pod routes' metric, as "CIDR via IP".
func podRoutes(ctx context.Context, m *member) ([]string, error) {
	out, _, err := m.h.Run(ctx, "ip", "-4", "-j", "route", "show", "table", "main", "proto", "217")
	if err != nil {
		return nil, err
	}
	var rs []struct {
		Dst, Gateway string
		Metric       int
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	var got []string
	for _, r := range rs {
		if r.Metric == 217 {
			got = append(got, r.Dst+" via "+r.Gateway)
		}
	}
	slices.Sort(got)
	return got, nil
}

// waitRoutes waits until each of members routes exactly to the others'
// pod CIDRs via their InternalIPs.
func (f *fleet) waitRoutes(t *testing.T, members []*member) {
	for _, m := range members {
		var want []string
		for _, o := range members {
			if o != m {
				want = append(want, o.podCIDR+" via "+o.ip)
			}
		}
		slices.Sort(want)
		d := poll(t, f.ctx, time.Minute, m.name+": routes to the other nodes' pods", func() string {
			got, err := podRoutes(f.ctx, m)
			if err != nil {
				return err.Error()
			}
			if !slices.Equal(got, want) {
				return fmt.Sprintf("routes %q, want %q", got, want)
			}
			return ""
		})
		t.Logf("BENCH fleet host=%s pod-routes-after-ready=%v", m.name, d.Round(time.Millisecond))
	}
}

// webPod serves its node's name on :8080 and logs who asks (busybox
// httpd -vv logs each request with the client's address, loggedFrom).
func webPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + node, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "web", Image: fixtures.BusyboxImageRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "mkdir -p /www && echo " + node + " > /www/index.html && exec httpd -f -vv -p 8080 -h /www"},
			}},
		},
	}
}

// checkPodToPod: a web pod on each node; from inside each, every other
// node's pod answers by pod IP, and logs the asking pod's own IP. (The
// image's static busybox wget crashes with -T; timeout bounds it.)
func (f *fleet) checkPodToPod(t *testing.T) {
	pods := f.cp.Client.CoreV1().Pods("default")
	ips := map[string]string{}
	for _, m := range f.members {
		if _, err := pods.Create(f.ctx, webPod(m.name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range f.members {
		poll(t, f.ctx, 2*time.Minute, "pod web-"+m.name+" running", func() string {
			p, err := pods.Get(f.ctx, "web-"+m.name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return fmt.Sprintf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
			}
			ips[m.name] = p.Status.PodIP
			return ""
		})
	}
	for _, from := range f.members {
		for _, to := range f.members {
			if from == to {
				continue
			}
			url := "http://" + ips[to.name] + ":8080/"
			var answer string
			d := poll(t, f.ctx, 30*time.Second, fmt.Sprintf("web-%s -> %s (web-%s)", from.name, url, to.name), func() string {
				out, err := f.cp.Kubectl(f.ctx, nil, "exec", "web-"+from.name, "--", "timeout", "5", "wget", "-q", "-O-", url)
				if answer = strings.TrimSpace(string(out)); err != nil || answer != to.name {
					return fmt.Sprintf("answer %q, %v", answer, err)
				}
				return ""
			})
			t.Logf("web-%s (%s) -> web-%s (%s): %q in %v", from.name, ips[from.name], to.name, ips[to.name], answer, d.Round(time.Millisecond))
			// The answering pod saw the asking pod's address: no
			// masquerade between pod networks.
			poll(t, f.ctx, 10*time.Second, "web-"+to.name+" logs a request from "+ips[from.name], func() string {
				b, err := pods.GetLogs("web-"+to.name, &corev1.PodLogOptions{}).DoRaw(f.ctx)
				if err != nil || !loggedFrom(string(b), ips[from.name]) {
					return fmt.Sprintf("logs %q, %v", b, err)
				}
				return ""
			})
		}
	}
}

// loggedFrom says httpd logged a request from ip: "IP:PORT: url:/", or
// "[::ffff:IP]:PORT: url:/" from its IPv6 socket.
func loggedFrom(logs, ip string) bool {
	return strings.Contains("\n"+logs, "\n"+ip+":") || strings.Contains(logs, "[::ffff:"+ip+"]:")
}

// checkNodeDeletion: gone's node is drained of its web pod and stops (its
// agent and its machine, so nothing registers the Node again), its Node is deleted, and the others
// drop their route to it within seconds and keep theirs to each other.
func (f *fleet) checkNodeDeletion(t *testing.T, gone *member) {
	f.deleteWebPods(t, gone)
	gone.h.RunOK(t, "systemctl", "stop", "aks-flex-node-agent.service")
	gone.h.RunOK(t, "machinectl", "terminate", "kube1")
	if err := f.cp.Client.CoreV1().Nodes().Delete(f.ctx, gone.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var rest []*member
	for _, m := range f.members {
		if m != gone {
			rest = append(rest, m)
		}
	}
	for _, m := range rest {
		d := poll(t, f.ctx, 15*time.Second, m.name+": the route to deleted "+gone.name+" gone", func() string {
			got, err := podRoutes(f.ctx, m)
			if err != nil {
				return err.Error()
			}
			for _, r := range got {
				if strings.HasPrefix(r, gone.podCIDR+" ") {
					return fmt.Sprintf("routes %q", got)
				}
			}
			return ""
		})
		t.Logf("BENCH fleet host=%s route-gone-after-node-delete=%v", m.name, d.Round(time.Millisecond))
	}
	f.waitRoutes(t, rest)
}

// deleteWebPods deletes the web pods of members and waits until they are
// gone, as an operator drains a node before it stops or resets: a
// container still running when the machine stops (busybox httpd is PID 1
// in its pod and ignores SIGTERM) holds the machine's shutdown until
// systemd's stop timeout (90 s), longer than reset waits for it.
func (f *fleet) deleteWebPods(t *testing.T, members ...*member) {
	pods := f.cp.Client.CoreV1().Pods("default")
	grace := int64(1) // the kubelet kills the container, then the object goes
	for _, m := range members {
		if err := pods.Delete(f.ctx, "web-"+m.name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, f.ctx, time.Minute, "web pods gone", func() string {
		for _, m := range members {
			if _, err := pods.Get(f.ctx, "web-"+m.name, metav1.GetOptions{}); err == nil {
				return "web-" + m.name + " still there"
			}
		}
		return ""
	})
}

// checkResets: reset on each host leaves its network as before the join
// (the Ignition host's: see ignitionNetDiff).
func (f *fleet) checkResets(t *testing.T) {
	var acl netState
	for _, m := range f.members {
		if m.variant == aclhost.ACL && !m.ignition {
			acl = m.netBefore
		}
	}
	var live []*member
	for _, m := range f.members {
		if _, err := f.cp.Client.CoreV1().Nodes().Get(f.ctx, m.name, metav1.GetOptions{}); err == nil {
			live = append(live, m)
		}
	}
	f.deleteWebPods(t, live...)
	for i, m := range f.members {
		begin := time.Now()
		m.h.RunOK(t, m.agent, "reset")
		t.Logf("BENCH fleet host=%s reset=%v", m.name, time.Since(begin).Round(time.Millisecond))
		var d []string
		if m.ignition {
			d = ignitionNetDiff(t, m, f.lab.hosts[i], acl)
		} else {
			d = netsnap.Diff(m.netBefore, netsnap.Take(t, m.h))
		}
		if len(d) > 0 {
			t.Errorf("%s: reset left the host's network changed:\n%s", m.name, strings.Join(d, "\n"))
		}
	}
}

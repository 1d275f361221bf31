// Package join is the product's main job end to end: an ACL-like host (read-only
// /usr) joins a real control plane through install.sh and `start`, runs a
// pod, converges on a second start, and resets and uninstalls cleanly.
package join

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

const (
	hostAddr = "10.250.0.2" // the test host's end of the veth
	cpAddr   = "10.250.0.1" // the control plane's end, on this machine
	nodeName = "acl-node-1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// netns makes a network namespace with a veth pair: the control plane
// listens on cpAddr in this namespace, the test host lives in the new one.
// Traffic only ever goes between the two ends.
func netns(t *testing.T) string {
	name := fmt.Sprintf("afn-%d", os.Getpid()%100000)
	veth := fmt.Sprintf("afnv%d", os.Getpid()%100000)
	_ = exec.Command("ip", "netns", "del", name).Run()
	_ = exec.Command("ip", "link", "del", veth).Run()
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", veth+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	run(t, "ip", "link", "set", veth+"p", "netns", name)
	run(t, "ip", "addr", "add", cpAddr+"/30", "dev", veth)
	run(t, "ip", "link", "set", veth, "up")
	run(t, "ip", "netns", "exec", name, "ip", "addr", "add", hostAddr+"/30", "dev", veth+"p")
	run(t, "ip", "netns", "exec", name, "ip", "link", "set", veth+"p", "up")
	run(t, "ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
	return "/run/netns/" + name
}

func buildAgent(t *testing.T, out string) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
}

func TestACLJoin(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	layoutDir, workerRef, err := fixtures.WorkerImage(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	bundle, m, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubernetesVersion: "1.35.4"})
	if err != nil {
		t.Fatal(err)
	}
	_ = workerRef
	ns := netns(t)
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: cpAddr, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr)
		}
		_ = cp.Stop()
	})

	h := aclhost.MustStart(t, aclhost.Options{Variant: aclhost.ACL, Name: "join", NetNS: ns, ExtraArgs: []string{
		"--bind=/dev/kmsg", // a real host has one; the kubelet needs it
		// A real host filters no syscalls; runc needs the keyring ones.
		"--system-call-filter=@keyring bpf",
		// The test host's root is an overlay; containerd's overlay
		// snapshotter cannot stack on that, so give the machines a real
		// filesystem, as /var/lib is on a real host.
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + layoutDir + ":/var/lib/aks-flex-node-test/worker",
		"--bind-ro=" + bundle + ":/var/lib/aks-flex-node-test/bundle",
	}})
	dist := t.TempDir()
	buildAgent(t, dist+"/aks-flex-node")
	if err := h.CopyIn(dist+"/aks-flex-node", "/root/dist/aks-flex-node", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"install.sh", "uninstall.sh"} {
		if err := h.CopyIn(filepath.Join(repoRoot(), "scripts", s), "/root/dist/"+s, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      map[string]any{"bootstrapToken": map[string]any{"token": cp.Token}},
		"agent":      map[string]any{"nodeName": nodeName, "hostPrefix": "/opt/aks-flex-node"},
		"components": map[string]any{"kubernetes": m.Components.Kubernetes, "containerd": m.Components.Containerd, "runc": m.Components.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": m.Components.CNI},
		"bootstrap": map[string]any{"ociImage": "oci-layout:///var/lib/aks-flex-node-test/worker:" + fixtures.WorkerTag,
			"offlineArtifacts": map[string]any{"source": "/var/lib/aks-flex-node-test/bundle"}},
		"node": map[string]any{"kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(cp.CAPEM), "nodeIP": hostAddr}},
	}, "", "  ")
	if err := h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}

	sum := sha256File(t, dist+"/aks-flex-node")
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sum)
	agent := "/opt/aks-flex-node/bin/aks-flex-node"

	join := func(label string) (string, time.Duration) {
		start := time.Now()
		out, stderr, err := h.Run(ctx, agent, "start", "--join-timeout", "2m")
		d := time.Since(start)
		t.Logf("%s start took %v\n%s", label, d.Round(time.Millisecond), out)
		if err != nil {
			j, _, _ := h.Run(ctx, "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "120", "-u", "kubelet")
			t.Fatalf("%s start: %v\n%s\nkubelet:\n%s", label, err, stderr, j)
		}
		return out, d
	}
	_, first := join("first")
	client := cp.Client
	waitReady(t, ctx, client)

	// A busybox pod from the bundle runs and its logs come back through the API server.
	logs := runPod(t, ctx, client, h)
	if strings.TrimSpace(logs) != "hello from aks-flex-node" {
		t.Errorf("pod logs %q", logs)
	}

	// Nothing under /usr, the agent runs from the prefix.
	changes, err := h.Changes()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if strings.Contains(c, " /usr/") {
			t.Errorf("written under /usr: %s", c)
		}
	}
	if exe := h.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", "aks-flex-node-agent.service"); !strings.Contains(exe, "path="+agent) {
		t.Errorf("agent ExecStart: %s", exe)
	}

	// A second start on the converged host changes nothing.
	out, second := join("second")
	if !strings.Contains(out, "nothing changed") {
		t.Errorf("second start did not report convergence:\n%s", out)
	}
	t.Logf("BENCH join=%v converged-rerun=%v", first.Round(time.Millisecond), second.Round(time.Millisecond))

	// reset, then uninstall, leave nothing of ours.
	h.RunOK(t, agent, "reset")
	h.RunOK(t, "/root/dist/uninstall.sh")
	after, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("reset + uninstall left changes:\n%s", strings.Join(d, "\n"))
	}
}

func sha256File(t *testing.T, p string) string {
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[0]
}

func waitReady(t *testing.T, ctx context.Context, c *kubernetes.Clientset) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("node %s not Ready", nodeName)
}

func runPod(t *testing.T, ctx context.Context, c *kubernetes.Clientset, h *aclhost.Host) string {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "hello", Image: fixtures.BusyboxImageRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "echo hello from aks-flex-node"},
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var phase corev1.PodPhase
	for time.Now().Before(deadline) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err == nil {
			phase = p.Status.Phase
			if phase == corev1.PodSucceeded {
				break
			}
			if phase == corev1.PodFailed {
				t.Fatalf("pod failed: %+v", p.Status)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if phase != corev1.PodSucceeded {
		p, _ := c.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		var events []string
		if evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); err == nil {
			for _, e := range evs.Items {
				events = append(events, e.Reason+": "+e.Message)
			}
		}
		j, _, _ := h.Run(ctx, "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "60", "-u", "containerd")
		t.Fatalf("pod not Succeeded: %s\nevents:\n%s\ncontainerd:\n%s", p.Status.Phase, strings.Join(events, "\n"), j)
	}
	b, err := c.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("pod logs through the API server: %v", err)
	}
	return string(b)
}

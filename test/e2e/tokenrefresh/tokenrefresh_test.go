// Package tokenrefresh keeps a node that signs in with an Entra identity
// whose tokens live 3 minutes Ready for 10 minutes: the kubelet asks its
// credential plugin (token kubelogin) for a new token as each comes due,
// the plugin serves the cache in between and fetches ahead of expiry, and
// the token endpoint's hits are counted. It is a package of its own so it
// runs beside the other end-to-end packages instead of after them.
package tokenrefresh

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/entratest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

const (
	tokenLifetime = 3 * time.Minute
	watchFor      = 10 * time.Minute
	nodeName      = "refresh-node-1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestTokenRefresh(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	layoutDir, _, err := fixtures.WorkerImage(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	bundle, manifest, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubernetesVersion: "1.35.4"})
	if err != nil {
		t.Fatal(err)
	}
	link := netlab.New(t)
	en := entratest.Start(t, link)
	en.Tenant.SetLifetime(tokenLifetime)
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: link.Outer, Logf: t.Logf, AuthenticationConfig: en.AuthenticationConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr)
		}
		_ = cp.Stop()
	})
	dist := t.TempDir()
	agent := dist + "/aks-flex-node"
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}

	h := aclhost.MustStart(t, aclhost.Options{Variant: aclhost.Debian, Name: "refresh", NetNS: link.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + layoutDir + ":/var/lib/aks-flex-node-test/worker",
		"--bind-ro=" + bundle + ":/var/lib/aks-flex-node-test/bundle",
	}})
	t.Cleanup(func() {
		if t.Failed() {
			j, _, _ := h.Run(context.Background(), "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "100", "-u", "kubelet")
			t.Logf("kubelet in kube1:\n%s", j)
		}
	})
	en.Trust(t, h)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.CopyIn(agent, "/root/dist/aks-flex-node", 0o755))
	must(h.CopyIn(filepath.Join(repoRoot(), "scripts", "install.sh"), "/root/dist/install.sh", 0o755))
	m := manifest.Components
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      en.Azure("sp-secret"),
		"agent":      map[string]any{"nodeName": nodeName},
		"components": map[string]any{"kubernetes": m.Kubernetes, "containerd": m.Containerd, "runc": m.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": m.CNI},
		"bootstrap": map[string]any{"ociImage": "oci-layout:///var/lib/aks-flex-node-test/worker:" + fixtures.WorkerTag,
			"offlineArtifacts": map[string]any{"source": "/var/lib/aks-flex-node-test/bundle"}},
		"node": map[string]any{"kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(cp.CAPEM), "nodeIP": link.Inner}},
	}, "", "  ")
	must(h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600))

	// The admin lets the service principal run a kubelet.
	prepared := filepath.Join(t.TempDir(), "prepare.yaml")
	if out, err := exec.CommandContext(ctx, agent, "cluster", "prepare", "--identity", en.SP.ObjectID, "--output", prepared).CombinedOutput(); err != nil {
		t.Fatalf("cluster prepare: %v\n%s", err, out)
	}
	if _, err := cp.Kubectl(ctx, nil, "apply", "-f", prepared); err != nil {
		t.Fatal(err)
	}

	sum, _, err := fsutil.FileSHA256(agent)
	must(err)
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sum)
	begin := time.Now()
	out, stderr, err := h.Run(ctx, "/usr/local/bin/aks-flex-node", "start", "--join-timeout", "2m")
	if err != nil {
		t.Fatalf("start: %v\n%s\n%s", err, out, stderr)
	}
	kubetest.WaitReady(ctx, t, cp.Client, nodeName, 2*time.Minute)
	t.Logf("BENCH token-refresh join=%v (service principal secret)", time.Since(begin).Round(time.Millisecond))

	watch(ctx, t, cp, en)
	h.RunOK(t, "/usr/local/bin/aks-flex-node", "reset")
}

// watch keeps the node under observation for watchFor: Ready, and its
// lease renewed within the last minute, at every look (a kubelet whose
// token expired can renew nothing), and counts the tokens minted.
func watch(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, en *entratest.Entra) {
	startHits := en.Tenant.Issued(en.SP.AppID)
	start := time.Now()
	looks := 0
	for time.Since(start) < watchFor {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Second):
		}
		looks++
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after %v: %v", time.Since(start).Round(time.Second), err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		lease, err := cp.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after %v: lease: %v", time.Since(start).Round(time.Second), err)
		}
		age := time.Since(lease.Spec.RenewTime.Time)
		if !ready || age > time.Minute {
			t.Fatalf("after %v: Ready=%v, lease renewed %v ago (tokens minted so far: %d)", time.Since(start).Round(time.Second), ready, age.Round(time.Second), en.Tenant.Issued(en.SP.AppID)-startHits)
		}
	}
	hits := en.Tenant.Issued(en.SP.AppID) - startHits
	t.Logf("BENCH token-refresh lifetime=%v watched=%v looks=%d token-endpoint-hits=%d (total token requests %d)", tokenLifetime, watchFor, looks, hits, en.Tenant.TokenRequests())
	// 10 minutes of 3-minute tokens need at least 3 new ones; a plugin
	// that did not cache would be asked far more often.
	if min, max := int64(watchFor/tokenLifetime), int64(20); hits < min || hits > max {
		t.Errorf("%d tokens minted in %v, want between %d and %d", hits, watchFor, min, max)
	}
}

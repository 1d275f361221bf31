// Package tokenrefresh keeps a node that joined with an Entra identity
// Ready on short-lived credentials: the tenant's tokens live 3 minutes and
// the controller-manager signs 3-minute certificates. The identity's
// token only bootstraps the kubelet's client certificate (its credential
// plugin, token kubelogin, in the bootstrap kubeconfig); from then on the
// node is system:node:<name> and renews its certificate through CSRs it
// signs with the current one (selfnodeclient), approved by the
// controller-manager, with no new token for the identity. The test
// watches for 6 minutes: at least two renewals, each a certificate for
// the node, the node Ready with its lease fresh at every look, and the
// token endpoint not asked again (a kubelet whose certificate lapsed
// would bootstrap again with the identity). It is a package of its own so
// it runs beside the other end-to-end packages instead of after them.
package tokenrefresh

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
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
	certLifetime  = 3 * time.Minute
	// watchFor sees at least two renewals: the kubelet renews at 70 to
	// 90 percent of a certificate's life.
	watchFor = 6 * time.Minute
	nodeName = "refresh-node-1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestTokenRefresh(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
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
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: link.Outer, Logf: t.Logf, AuthenticationConfig: en.AuthenticationConfig(), SigningDuration: certLifetime})
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

	machines := t.TempDir()
	h := aclhost.MustStart(t, aclhost.Options{Variant: aclhost.Debian, Name: "refresh", NetNS: link.NS, ExtraArgs: []string{
		"--bind=" + machines + ":/var/lib/machines",
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

	// The admin lets the service principal bootstrap a kubelet.
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

	watch(ctx, t, cp, en, filepath.Join(machines, "kube1"))
	h.RunOK(t, "/usr/local/bin/aks-flex-node", "reset")
}

// watch keeps the node under observation for watchFor: Ready, and its
// lease renewed within the last minute, at every look (a kubelet whose
// certificate expired can renew nothing); it counts the client
// certificates the kubelet in the machine at machineRoot holds, each of
// which must be the node's, the node's own approved renewal CSRs, and
// the identity's tokens minted meanwhile, which must be none.
func watch(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, en *entratest.Entra, machineRoot string) {
	startHits := en.Tenant.Issued(en.SP.AppID)
	start := time.Now()
	looks := 0
	serials := map[string]bool{}
	for time.Since(start) < watchFor {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(15 * time.Second):
		}
		looks++
		after := time.Since(start).Round(time.Second)
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after %v: %v", after, err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		lease, err := cp.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after %v: lease: %v", after, err)
		}
		age := time.Since(lease.Spec.RenewTime.Time)
		if !ready || age > time.Minute {
			t.Fatalf("after %v: Ready=%v, lease renewed %v ago (certificates seen %d)", after, ready, age.Round(time.Second), len(serials))
		}
		cert := clientCert(t, machineRoot)
		if cert.Subject.CommonName != "system:node:"+nodeName || strings.Join(cert.Subject.Organization, ",") != "system:nodes" {
			t.Fatalf("after %v: the kubelet's certificate is for %q %v, want system:node:%s in system:nodes", after, cert.Subject.CommonName, cert.Subject.Organization, nodeName)
		}
		serials[cert.SerialNumber.String()] = true
	}
	hits := en.Tenant.Issued(en.SP.AppID) - startHits
	renewals := approvedRenewals(ctx, t, cp)
	t.Logf("BENCH token-refresh cert-lifetime=%v token-lifetime=%v watched=%v looks=%d certificates=%d renewal-csrs=%d token-endpoint-hits=%d (total token requests %d)",
		certLifetime, tokenLifetime, watchFor, looks, len(serials), renewals, hits, en.Tenant.TokenRequests())
	if len(serials) < 3 || renewals < 2 {
		t.Errorf("%d certificates seen and %d renewal CSRs approved in %v of %v certificates, want at least 3 and 2", len(serials), renewals, watchFor, certLifetime)
	}
	if hits != 0 {
		t.Errorf("%d tokens minted for the identity after the join: the node should need it only to bootstrap", hits)
	}
}

// clientCert is the kubelet's current client certificate in the machine.
func clientCert(t *testing.T, machineRoot string) *x509.Certificate {
	t.Helper()
	p := filepath.Join(machineRoot, "var/lib/kubelet/pki/kubelet-client-current.pem")
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	// The link is absolute inside the machine.
	if !filepath.IsAbs(target) {
		target = filepath.Join("/var/lib/kubelet/pki", target)
	}
	data, err := os.ReadFile(filepath.Join(machineRoot, target))
	if err != nil {
		t.Fatal(err)
	}
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			t.Fatalf("%s: no certificate", p)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// approvedRenewals counts the approved kubelet client CSRs the node made
// as itself (the selfnodeclient renewals, not the identity's bootstrap).
func approvedRenewals(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) int {
	t.Helper()
	csrs, err := cp.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range csrs.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || c.Spec.Username != "system:node:"+nodeName {
			continue
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == certificatesv1.CertificateApproved {
				n++
			}
		}
	}
	return n
}

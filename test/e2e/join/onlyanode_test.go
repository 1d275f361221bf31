package join

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/entratest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// deletingTaint is the taint whose agent drains and resets its host
// (daemon.DeletingTaint).
const deletingTaint = "kubernetes.azure.com/flex-node-deleting"

// TestIdentityNodeIsOnlyANode (issue 26 item 1): a node that joins with an
// Entra identity (a service principal's secret, against the fake tenant
// and a real API server with the Node authorizer and NodeRestriction),
// after an admin applied what `cluster prepare --identity` prints, ends
// up as system:node:<name> in system:nodes. Its own credential (the
// kubelet's kubeconfig and client certificate in the machine, what the
// agent signs in with) and the identity's bearer token are each refused
// what the issue reproduced with the old system:node binding: read a
// kube-system Secret, mint a token for a cluster-admin ServiceAccount,
// create a pod in kube-system, rewrite another Node's InternalIP, and put
// the deletion taint on another Node.
func TestIdentityNodeIsOnlyANode(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const nodeName, otherNode = "only-a-node-1", "other-node-1"
	j := startIdentityJoin(ctx, t, "onlyanode", nodeName)

	// What the five actions aim at, made by the admin: a Secret and a
	// cluster-admin ServiceAccount in kube-system, and a second Node.
	admin := j.cp.Client
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("admin: create %s: %v", what, err)
		}
	}
	_, err := admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-secret"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustCreate("secret", err)
	_, err = admin.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "e2e-admin"}}, metav1.CreateOptions{})
	mustCreate("service account", err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "e2e-admin", Namespace: "kube-system"}}}, metav1.CreateOptions{})
	mustCreate("cluster-admin binding", err)
	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}, metav1.CreateOptions{})
	mustCreate("node "+otherNode, err)
	_, err = admin.CoreV1().Nodes().PatchStatus(ctx, otherNode, []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"10.99.0.7"}]}}`))
	mustCreate("node status", err)

	// The node's credential, as the agent reads it: the kubelet's
	// kubeconfig in the machine, its certificate paths inside the machine.
	nodeCfg := machineKubeconfig(t, filepath.Join(j.machines, "kube1"))
	if nodeCfg.ExecProvider != nil || nodeCfg.BearerToken != "" || len(nodeCfg.CertData) == 0 {
		t.Fatalf("the kubelet's kubeconfig: exec %v, bearer %v, certificate %d bytes; want a client certificate only", nodeCfg.ExecProvider, nodeCfg.BearerToken != "", len(nodeCfg.CertData))
	}
	nodeClient := kubernetes.NewForConfigOrDie(nodeCfg)
	who := whoAmI(ctx, t, nodeClient)
	if who.Username != "system:node:"+nodeName || !slices.Contains(who.Groups, "system:nodes") {
		t.Fatalf("the node's credential is %q (groups %v), want system:node:%s in system:nodes", who.Username, who.Groups, nodeName)
	}
	// It is the node: it may update its own Node.
	if _, err := nodeClient.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"e2e.aks-flex-node/own":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the node may not label its own Node: %v", err)
	}
	refusedTheFive(ctx, t, "the node's credential ("+who.Username+")", nodeClient, nodeName, otherNode)

	// The identity itself, with a token the tenant mints for it.
	tok, _, err := j.entra.Tenant.Mint(j.entra.SP.AppID, entratest.AKSServerID)
	if err != nil {
		t.Fatal(err)
	}
	idClient := kubernetes.NewForConfigOrDie(&rest.Config{Host: j.cp.Server, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: j.cp.CAPEM}})
	if who := whoAmI(ctx, t, idClient); who.Username != j.entra.SP.ObjectID {
		t.Fatalf("the identity's token is %q, want its object ID %s", who.Username, j.entra.SP.ObjectID)
	}
	refusedTheFive(ctx, t, "the identity ("+j.entra.SP.ObjectID+")", idClient, nodeName, otherNode)

	// Neither changed the other Node.
	n, err := admin.CoreV1().Nodes().Get(ctx, otherNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (The node lifecycle controller taints it not-ready: no kubelet.)
	deleting := slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == deletingTaint })
	if deleting || len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "10.99.0.7" {
		t.Errorf("node %s changed: taints %v addresses %v", otherNode, n.Spec.Taints, n.Status.Addresses)
	}
	j.host.RunOK(t, "/usr/local/bin/aks-flex-node", "reset")
}

// refusedTheFive checks that client is refused (403) each of the five
// actions of issue 26 item 1; self is its own node, other another Node.
func refusedTheFive(ctx context.Context, t *testing.T, who string, c kubernetes.Interface, self, other string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e2e-escape"}, Spec: corev1.PodSpec{NodeName: self,
		Containers: []corev1.Container{{Name: "c", Image: fixtures.PauseImageRef}}}}
	taint, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": []map[string]string{{"key": deletingTaint, "effect": "NoSchedule"}}}})
	for _, a := range []struct {
		what string
		do   func() error
	}{
		{"read Secret kube-system/e2e-secret", func() error {
			_, err := c.CoreV1().Secrets("kube-system").Get(ctx, "e2e-secret", metav1.GetOptions{})
			return err
		}},
		{"create a token for the cluster-admin ServiceAccount kube-system/e2e-admin", func() error {
			_, err := c.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "e2e-admin", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
		{"create a pod in kube-system", func() error {
			_, err := c.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{})
			return err
		}},
		{"patch Node " + other + "'s InternalIP", func() error {
			_, err := c.CoreV1().Nodes().PatchStatus(ctx, other, []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"10.99.0.66"}]}}`))
			return err
		}},
		{"put " + deletingTaint + " on Node " + other, func() error {
			_, err := c.CoreV1().Nodes().Patch(ctx, other, types.StrategicMergePatchType, taint, metav1.PatchOptions{})
			return err
		}},
	} {
		err := a.do()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s may %s: err %v, want 403 Forbidden", who, a.what, err)
			continue
		}
		t.Logf("%s may not %s: %v", who, a.what, err)
	}
}

// whoAmI is what the API server says c is (SelfSubjectReview).
func whoAmI(ctx context.Context, t *testing.T, c kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo
}

// machineKubeconfig is the kubelet's kubeconfig in the machine at root,
// the files it names read inside the machine (their paths are the
// machine's), as the agent reads it.
func machineKubeconfig(t *testing.T, root string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(filepath.Join(root, "etc/kubernetes/kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's current-certificate link is absolute inside the
	// machine: resolve it there.
	read := func(p string) []byte {
		for range 8 {
			target, err := os.Readlink(filepath.Join(root, p))
			if err != nil {
				break
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			p = target
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, ai := range cfg.AuthInfos {
		if ai.ClientCertificate != "" {
			ai.ClientCertificateData, ai.ClientCertificate = read(ai.ClientCertificate), ""
		}
		if ai.ClientKey != "" {
			ai.ClientKeyData, ai.ClientKey = read(ai.ClientKey), ""
		}
	}
	for _, c := range cfg.Clusters {
		if c.CertificateAuthority != "" {
			c.CertificateAuthorityData, c.CertificateAuthority = read(c.CertificateAuthority), ""
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// identityJoin is a host joined with a service principal's secret.
type identityJoin struct {
	cp    *controlplane.ControlPlane
	entra *entratest.Entra
	host  *aclhost.Host
	// machines is the host's /var/lib/machines, on this machine.
	machines string
}

// startIdentityJoin starts a control plane that trusts a fake tenant,
// grants its service principal what `cluster prepare --identity` prints,
// and joins a Debian host named nodeName with it, until Ready.
func startIdentityJoin(ctx context.Context, t *testing.T, name, nodeName string) *identityJoin {
	t.Helper()
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
	j := &identityJoin{entra: entratest.Start(t, link), machines: t.TempDir()}
	if j.cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: link.Outer, Logf: t.Logf, AuthenticationConfig: j.entra.AuthenticationConfig()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			j.cp.DumpLogs(os.Stderr)
		}
		_ = j.cp.Stop()
	})
	agent := filepath.Join(t.TempDir(), "aks-flex-node")
	buildAgent(t, agent)
	j.host = aclhost.MustStart(t, aclhost.Options{Variant: aclhost.Debian, Name: name, NetNS: link.NS, ExtraArgs: []string{
		"--bind=" + j.machines + ":/var/lib/machines",
		"--bind-ro=" + layoutDir + ":/var/lib/aks-flex-node-test/worker",
		"--bind-ro=" + bundle + ":/var/lib/aks-flex-node-test/bundle",
	}})
	t.Cleanup(func() {
		if t.Failed() {
			out, _, _ := j.host.Run(context.Background(), "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "100", "-u", "kubelet")
			t.Logf("kubelet in kube1:\n%s", out)
		}
	})
	j.entra.Trust(t, j.host)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.host.CopyIn(agent, "/root/dist/aks-flex-node", 0o755))
	must(j.host.CopyIn(filepath.Join(repoRoot(), "scripts", "install.sh"), "/root/dist/install.sh", 0o755))
	m := manifest.Components
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      j.entra.Azure("sp-secret"),
		"agent":      map[string]any{"nodeName": nodeName},
		"components": map[string]any{"kubernetes": m.Kubernetes, "containerd": m.Containerd, "runc": m.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": m.CNI},
		"bootstrap": map[string]any{"ociImage": "oci-layout:///var/lib/aks-flex-node-test/worker:" + fixtures.WorkerTag,
			"offlineArtifacts": map[string]any{"source": "/var/lib/aks-flex-node-test/bundle"}},
		"node": map[string]any{"kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(j.cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(j.cp.CAPEM), "nodeIP": link.Inner}},
	}, "", "  ")
	must(j.host.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600))

	prepared := filepath.Join(t.TempDir(), "prepare.yaml")
	if out, err := exec.CommandContext(ctx, agent, "cluster", "prepare", "--identity", j.entra.SP.ObjectID, "--output", prepared).CombinedOutput(); err != nil {
		t.Fatalf("cluster prepare: %v\n%s", err, out)
	}
	if out, err := j.cp.Kubectl(ctx, nil, "apply", "-f", prepared); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -f %s:\n%s", prepared, out)
	}
	j.host.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256File(t, agent))
	begin := time.Now()
	out, stderr, err := j.host.Run(ctx, "/usr/local/bin/aks-flex-node", "start", "--join-timeout", "2m")
	if err != nil {
		t.Fatalf("start: %v\n%s\n%s", err, out, stderr)
	}
	kubetest.WaitReady(ctx, t, j.cp.Client, nodeName, 2*time.Minute)
	t.Logf("BENCH identity-join join=%v (service principal secret, TLS bootstrap)", time.Since(begin).Round(time.Millisecond))
	return j
}

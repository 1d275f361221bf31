package controlplane_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"

	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

// E2EEnv gates the tests that run real Kubernetes components.
const E2EEnv = "AKS_FLEX_NODE_E2E"

// WorkDirEnv, when set, is where each test's control plane keeps its files
// instead of a temporary directory removed after the test.
const WorkDirEnv = "AKS_FLEX_NODE_E2E_WORKDIR"

// startControlPlane skips unless E2EEnv=1; with it set, missing binaries
// are a failure, not a skip, so CI cannot pass by not testing.
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv(E2EEnv) != "1" {
		t.Skipf("set %s=1 to run against a real control plane (binaries from test/e2e/build-k8s.sh)", E2EEnv)
	}
}

func startControlPlane(t *testing.T, ctx context.Context, opts controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	requireE2E(t)
	binDir, err := controlplane.FindBinDir("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	// A named work dir survives the test, for reading component logs.
	workDir := os.Getenv(WorkDirEnv)
	if workDir == "" {
		workDir = t.TempDir()
	} else {
		workDir = filepath.Join(workDir, t.Name())
		if err := os.RemoveAll(workDir); err != nil {
			t.Fatal(err)
		}
	}
	opts.BinDir, opts.WorkDir, opts.Logf = binDir, workDir, t.Logf
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr)
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return cp
}

// TestControlPlaneBootstrapToken joins as kubeadm's token bootstrap does:
// the token authenticates in the bootstrap groups, a node CSR made with it
// is approved and signed, the certificate authenticates as the node, and
// cluster-info is signed with the token for discovery.
func TestControlPlaneBootstrapToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	cp := startControlPlane(t, ctx, controlplane.Options{})
	t.Logf("timings: etcd %s, kube-apiserver %s, start total %s",
		cp.Timings.Etcd.Round(time.Millisecond), cp.Timings.APIServer.Round(time.Millisecond), cp.Timings.Total.Round(time.Millisecond))

	checkServing(ctx, t, cp)
	bootstrap := kubernetes.NewForConfigOrDie(cp.BootstrapConfig())
	checkBootstrapTokenUser(ctx, t, cp, bootstrap)
	// The harness grants the token nothing; what `aks-flex-node cluster
	// prepare --bootstrap-token` prints does, applied with kubectl.
	objs, err := clusterprep.Render("test", clusterprep.BootstrapTokenObjects(clusterprep.BootstrapToken{ID: cp.TokenID, Secret: cp.TokenSecret}, time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, objs, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	const nodeName = "test-node"
	key, issued := tlsBootstrap(ctx, t, cp, bootstrap, nodeName)
	checkNodeCertificate(ctx, t, cp, key, issued, nodeName)
	checkClusterInfoSigned(ctx, t, cp)
	t.Logf("test total %s", time.Since(begin).Round(time.Millisecond))
}

// checkServing: the apiserver is ready and says it is 1.35, which it only
// does when build-k8s.sh stamped the version.
func checkServing(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) {
	body, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz = %q, %v", body, err)
	}
	v, err := cp.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server version %s", v.GitVersion)
	if v.Major != "1" || v.Minor != "35" {
		t.Errorf("server version %s (major %q minor %q), want 1.35: build-k8s.sh ldflags not applied", v.GitVersion, v.Major, v.Minor)
	}
}

// checkBootstrapTokenUser: who the bootstrap token is, as the apiserver
// sees it.
func checkBootstrapTokenUser(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, bootstrap kubernetes.Interface) {
	review, err := bootstrap.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the bootstrap token: %v", err)
	}
	user := review.Status.UserInfo
	if want := bootstrapapi.BootstrapUserPrefix + cp.TokenID; user.Username != want {
		t.Errorf("bootstrap token user = %q, want %q", user.Username, want)
	}
	for _, g := range []string{bootstrapapi.BootstrapDefaultGroup, controlplane.BootstrapGroup} {
		if !slices.Contains(user.Groups, g) {
			t.Errorf("bootstrap token groups %v lack %s", user.Groups, g)
		}
	}
}

// tlsBootstrap does what the kubelet does with the bootstrap token: a CSR
// for system:node:<nodeName>, which the controller-manager must approve and
// sign with the cluster CA. It returns the key and the issued certificate.
func tlsBootstrap(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, bootstrap kubernetes.Interface, nodeName string) (*ecdsa.PrivateKey, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := certutil.MakeCSR(key, &pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := bootstrap.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrPEM,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CSR with the bootstrap token: %v", err)
	}
	csrStart := time.Now()
	issued := waitIssued(ctx, t, bootstrap, csr.Name)
	t.Logf("CSR %s approved and issued in %s", csr.Name, time.Since(csrStart).Round(time.Millisecond))

	certs, err := certutil.ParseCertsPEM(issued)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := certutil.NewPoolFromBytes(cp.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("issued certificate does not chain to the cluster CA: %v", err)
	}
	return key, issued
}

// waitIssued waits until CSR name is approved and has a certificate, and
// returns it; a denied or failed CSR ends the test.
func waitIssued(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) []byte {
	var issued []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				t.Fatalf("CSR %s %s: %s: %s", name, c.Type, c.Reason, c.Message)
			}
		}
		approved := slices.ContainsFunc(got.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
			return c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue
		})
		issued = got.Status.Certificate
		return approved && len(issued) > 0, nil
	})
	if err != nil {
		t.Fatalf("CSR %s not approved and issued: %v", name, err)
	}
	return issued
}

// checkNodeCertificate: the issued certificate authenticates as the node.
func checkNodeCertificate(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, key *ecdsa.PrivateKey, issued []byte, nodeName string) {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := kubernetes.NewForConfigOrDie(&rest.Config{
		Host:            cp.LocalServer,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAPEM, CertData: issued, KeyData: keyPEM},
	})
	review, err := nodeClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the issued certificate: %v", err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:"+nodeName || !slices.Contains(u.Groups, "system:nodes") {
		t.Errorf("issued certificate authenticates as %q %v, want system:node:%s in system:nodes", u.Username, u.Groups, nodeName)
	}
}

// checkClusterInfoSigned: token discovery. The bootstrapsigner signs
// cluster-info with the token, and anonymous clients may read it.
func checkClusterInfoSigned(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) {
	anonymous := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.LocalServer, TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAPEM}})
	sigKey := bootstrapapi.JWSSignatureKeyPrefix + cp.TokenID
	var info *corev1.ConfigMap
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		info, err = anonymous.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := info.Data[sigKey]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("cluster-info has no %s: %v", sigKey, err)
	}
	if !jws.DetachedTokenIsValid(info.Data[sigKey], info.Data[bootstrapapi.KubeConfigKey], cp.TokenID, cp.TokenSecret) {
		t.Errorf("cluster-info %s does not verify with the token secret", sigKey)
	}
}

// inNetnsEnv marks the re-executed test binary running in its own network
// namespace.
const inNetnsEnv = "AKS_FLEX_NODE_E2E_IN_NETNS"

// advertiseAddress is put on lo inside a private network namespace, so the
// test uses a non-loopback address without touching the host's network.
const advertiseAddress = "10.200.0.1"

// TestControlPlaneAdvertiseAddress runs a control plane that nodes reach at
// a non-loopback address: the serving certificate, cluster-info, the
// bootstrap kubeconfig and the kubernetes Service endpoints all carry it.
func TestControlPlaneAdvertiseAddress(t *testing.T) {
	requireE2E(t)
	if os.Getenv(inNetnsEnv) != "1" {
		// Re-run just this test in a new network namespace with the address
		// on its loopback device.
		cmd := exec.Command("unshare", "--net", "--", "sh", "-ec",
			`ip link set lo up; ip addr add `+advertiseAddress+`/32 dev lo; exec "$@"`, "sh",
			os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a private network namespace:\n%s", out)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp := startControlPlane(t, ctx, controlplane.Options{AdvertiseAddress: advertiseAddress})
	if !strings.HasPrefix(cp.Server, "https://"+advertiseAddress+":") {
		t.Fatalf("Server = %s, want the advertise address %s", cp.Server, advertiseAddress)
	}

	// A node's bootstrap kubeconfig, used as the kubelet would: the serving
	// certificate must be valid for the advertise address.
	kubeconfig, err := cp.BootstrapKubeconfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bootstrap kubeconfig against %s: %v", cfg.Host, err)
	}
	if want := bootstrapapi.BootstrapUserPrefix + cp.TokenID; review.Status.UserInfo.Username != want {
		t.Errorf("bootstrap kubeconfig user = %q, want %q", review.Status.UserInfo.Username, want)
	}

	info, err := cp.Client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	published, err := clientcmd.Load([]byte(info.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	if c := published.Clusters[""]; c == nil || c.Server != cp.Server {
		t.Errorf("cluster-info server = %+v, want %s", published.Clusters, cp.Server)
	}

	// The apiserver publishes itself as the kubernetes Service's endpoint.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == advertiseAddress {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("kubernetes Service has no endpoint %s: %v", advertiseAddress, err)
	}
}

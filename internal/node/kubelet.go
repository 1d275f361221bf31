package node

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/genfile"
)

// renderKubeletConfig renders the KubeletConfiguration. Everything the
// kubelet accepts in its config file goes here rather than on the command
// line, where those flags are deprecated; that includes the taints
// (registerWithTaints) and the verbosity (logging.verbosity). Zero-valued
// durations marshal as "0s", as in kubeadm's file; the kubelet defaults them.
func renderKubeletConfig(in *inputs) ([]byte, error) {
	t, f := true, false
	resolvConf := "/etc/resolv.conf"
	kc := kubeletv1beta1.KubeletConfiguration{
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: ClusterCAFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &t},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &f},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{
			Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook,
		},
		ClusterDNS:               []string{in.dnsIP},
		ClusterDomain:            in.o.ClusterDomain,
		CgroupDriver:             in.o.CgroupDriver,
		FailCgroupV1:             in.o.FailCgroupV1,
		ContainerRuntimeEndpoint: "unix://" + ContainerdSocket,
		MaxPods:                  in.maxPods,
		// The client certificate is renewed through a CSR the kubelet
		// signs with its current certificate (selfnodeclient), whatever
		// credential bootstrapped it.
		RotateCertificates: true,
		// Serving certificates stay self-signed: a CSR for them needs an
		// approver the cluster may not run, and a pending one breaks logs
		// and exec.
		ServerTLSBootstrap: false,
		ResolverConfig:     &resolvConf,
		CgroupsPerQOS:      &t,
		// Swap is turned off on the host; failSwapOn keeps its default
		// (true) so a host where it is not fails loudly instead of
		// running pods with surprising memory behaviour.
		EnforceNodeAllocatable: []string{"pods"},
		RegisterNode:           &t,
	}
	// Zero means unset in the config file; the kubelet then uses its own.
	if in.gcHigh > 0 {
		kc.ImageGCHighThresholdPercent = &in.gcHigh
	}
	if in.gcLow > 0 {
		kc.ImageGCLowThresholdPercent = &in.gcLow
	}
	kc.APIVersion = kubeletv1beta1.SchemeGroupVersion.String()
	kc.Kind = "KubeletConfiguration"
	if v := in.verbosity; v != nil {
		if *v < 0 || *v > 10 {
			return nil, fmt.Errorf("node.kubelet.verbosity: %d must be between 0 and 10", *v)
		}
		kc.Logging.Verbosity = logsapi.VerbosityLevel(*v)
	}
	for _, s := range in.taints {
		taint, err := parseTaint(s)
		if err != nil {
			return nil, err
		}
		kc.RegisterWithTaints = append(kc.RegisterWithTaints, taint)
	}
	data, err := yaml.Marshal(&kc)
	if err != nil {
		return nil, err
	}
	return genfile.WithHeader(data), nil
}

// parseTaint reads key[=value]:Effect, the form config validation accepts.
func parseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("node.taints: %q must be key[=value]:Effect", s)
	}
	key, value, _ := strings.Cut(kv, "=")
	switch e := corev1.TaintEffect(effect); e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return corev1.Taint{Key: key, Value: value, Effect: e}, nil
	}
	return corev1.Taint{}, fmt.Errorf("node.taints: %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", s)
}

// renderKubeletUnit renders kubelet.service. Its command line carries only
// what KubeletConfiguration cannot: the kubeconfigs, the node's name, IP
// and labels. Each value was checked against unitArgRE, so none needs
// quoting for systemd.
func renderKubeletUnit(in *inputs) ([]byte, error) {
	return genfile.Render(genfile.KubeletUnit, struct {
		ContainerdUnit, Binary, ConfigFile, BootstrapKubeconfig, Kubeconfig string
		NodeName, NodeIP, NodeLabels                                        string
	}{
		ContainerdUnitName, KubeletBinary, KubeletConfigFile, BootstrapKubeconf, KubeletKubeconf,
		in.nodeName, in.nodeIP, strings.Join(in.labels, ","),
	})
}

// renderBootstrapKubeconfig renders the kubeconfig the kubelet uses only
// for its TLS bootstrap: to create the CSR for its client certificate
// (subject system:node:<name>, organisation system:nodes) and watch it be
// approved; it then writes its own KubeletKubeconf with the certificate
// it was issued, and renews that certificate with itself. The bootstrap
// credential is the bootstrap token, or with an Azure identity a token
// for the identity from the credential plugin (token kubelogin), which
// reads the identity dir bound into the machine. Either way the cluster
// grants it nothing but that CSR (clusterprep), so what the node can do
// is what the Node authorizer and NodeRestriction let a node do.
func renderBootstrapKubeconfig(in *inputs) ([]byte, error) {
	const name = "default"
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = in.server
	cluster.CertificateAuthorityData = in.caPEM
	cfg.Clusters[name] = cluster
	user := clientcmdapi.NewAuthInfo()
	if in.identity {
		user.Exec = &clientcmdapi.ExecConfig{
			APIVersion:      "client.authentication.k8s.io/v1",
			Command:         CredentialPlugin,
			Args:            []string{"token", "kubelogin", "--identity-dir", HostIdentityDir, "--server-id", in.serverID},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}
	} else {
		user.Token = in.token
	}
	cfg.AuthInfos["kubelet-bootstrap"] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster = name
	ctx.AuthInfo = "kubelet-bootstrap"
	cfg.Contexts[name] = ctx
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		// The encoder's error could quote the config; keep the token out.
		return nil, fmt.Errorf("encode kubeconfig failed")
	}
	return data, nil
}

// AKSServerID is the audience the plugin asks tokens for: the AKS AAD
// server application (identity.AKSServerID; node does not import identity
// and the Azure SDK with it).
const AKSServerID = "6dae42f8-4368-4678-94ff-3960e28e3630"

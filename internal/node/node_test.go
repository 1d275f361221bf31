package node

import (
	"bytes"
	"encoding/base64"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"k8s.io/client-go/tools/clientcmd"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/config"
)

var update = flag.Bool("update", false, "rewrite golden files")

const (
	testToken = "abcdef.0123456789abcdef"
	testCA    = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
)

func testConfig() *config.Config {
	c := &config.Config{}
	c.Agent.NodeName = "node-1"
	c.Azure.BootstrapToken = &config.BootstrapToken{Token: testToken}
	c.Components.SandboxImage = "mcr.microsoft.com/oss/kubernetes/pause:3.10"
	c.Networking.DNSServiceIP = "10.0.0.10"
	// The range the goldens were written with (the fallback once had it
	// as a default); the config names it, as a node's config may.
	c.Networking.PodCIDR = "10.244.0.0/24"
	c.Node.MaxPods = 110
	c.Node.Labels = map[string]string{"topology.kubernetes.io/zone": "z1", "example.com/pool": "flex", "tier": ""}
	c.Node.Taints = []string{"example.com/dedicated=flex:NoSchedule", "example.com/drain:NoExecute"}
	v := 2
	c.Node.Kubelet = config.Kubelet{
		ClusterFQDN:          "https://127.0.0.1:6443",
		CACertData:           base64.StdEncoding.EncodeToString([]byte(testCA)),
		NodeIP:               "127.0.0.2",
		Verbosity:            &v,
		ImageGCHighThreshold: 85,
		ImageGCLowThreshold:  80,
	}
	return c
}

// The two hosts that matter: the cgroup v1 build machine (no
// CAP_SYS_RESOURCE) and a production cgroup v2 host on defaults.
var cases = map[string]Options{
	"cgroupv1": {CgroupV1: true, RestrictOOMScoreAdj: true},
	"cgroupv2": {},
}

// identityConfig joins with a managed identity instead of the token.
func identityConfig() *config.Config {
	c := testConfig()
	c.Azure.BootstrapToken = nil
	c.Azure.ManagedIdentity = &config.ManagedIdentity{}
	return c
}

// goldenCases are the golden trees: each host with the token, and the
// cgroup v2 host with an Azure identity.
var goldenCases = map[string]struct {
	o Options
	c func() *config.Config
}{
	"cgroupv1": {cases["cgroupv1"], testConfig},
	"cgroupv2": {cases["cgroupv2"], testConfig},
	"identity": {cases["cgroupv2"], identityConfig},
	// kube-proxy: the agent runs it (kubeproxy_test.go).
	"kubeproxy": {cases["cgroupv2"], kubeProxyConfig},
}

func renderMap(t *testing.T, c *config.Config, o Options) map[string]File {
	t.Helper()
	files, err := Render(c, o)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]File{}
	for _, f := range files {
		if _, dup := m[f.Path]; dup {
			t.Fatalf("%s rendered twice", f.Path)
		}
		m[f.Path] = f
	}
	return m
}

// TestGolden compares every rendered file with testdata/<case>/<path>;
// links are listed in testdata/<case>/links.txt. -update rewrites them.
func TestGolden(t *testing.T) {
	for name, gc := range goldenCases {
		t.Run(name, func(t *testing.T) {
			files, err := Render(gc.c(), gc.o)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]bool{"links.txt": true}
			var links strings.Builder
			for _, f := range files {
				if f.Link != "" {
					links.WriteString(f.Path + " -> " + f.Link + "\n")
					continue
				}
				rel := strings.TrimPrefix(f.Path, "/")
				want[rel] = true
				checkGolden(t, filepath.Join(dir, rel), f.Data)
			}
			checkGolden(t, filepath.Join(dir, "links.txt"), []byte(links.String()))
			// A golden file nothing renders any more is a stale expectation.
			err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				if !want[filepath.ToSlash(rel)] {
					t.Errorf("golden file %s is not rendered", p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestModesAndSecrets(t *testing.T) {
	m := renderMap(t, testConfig(), cases["cgroupv1"])
	want := map[string]fs.FileMode{
		ClusterCAFile:      0o644,
		BootstrapKubeconf:  0o600,
		KubeletConfigFile:  0o644,
		ContainerdConfig:   0o644,
		CNIConfFile:        0o644,
		CgroupRWScript:     0o755,
		CgroupRWUnitFile:   0o644,
		ContainerdUnitFile: 0o644,
		KubeletUnitFile:    0o644,
	}
	for p, mode := range want {
		f, ok := m[p]
		if !ok {
			t.Errorf("%s not rendered", p)
			continue
		}
		if f.Mode != mode {
			t.Errorf("%s mode %o, want %o", p, f.Mode, mode)
		}
	}
	for p, f := range m {
		if bytes.Contains(f.Data, []byte(testToken)) && (!f.Secret || f.Mode != 0o600) {
			t.Errorf("%s holds the token but is not a 0600 secret", p)
		}
	}
	if m2 := renderMap(t, testConfig(), cases["cgroupv2"]); len(m2) != len(m)-3 {
		t.Errorf("cgroup v2 renders %d entries, want %d (no remount script, unit, link)", len(m2), len(m)-3)
	}
}

func TestBootstrapKubeconfigLoads(t *testing.T) {
	f := renderMap(t, testConfig(), Options{})[BootstrapKubeconf]
	cfg, err := clientcmd.Load(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		t.Fatalf("no current context in %+v", cfg)
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cl == nil || user == nil {
		t.Fatalf("context %+v names a missing cluster or user", ctx)
	}
	if cl.Server != "https://127.0.0.1:6443" || string(cl.CertificateAuthorityData) != testCA {
		t.Errorf("cluster = %s %q", cl.Server, cl.CertificateAuthorityData)
	}
	if user.Token != testToken {
		t.Errorf("token = %q", user.Token)
	}
}

// TestIdentityBootstrapKubeconfig (issue 26 item 1): a node that joins
// with an Azure identity TLS-bootstraps like a token node: the plugin's
// token is only the bootstrap credential, the kubelet writes its own
// kubeconfig with the certificate it is issued and rotates it, so it acts
// as system:node:<name> under the Node authorizer. Start renders no
// kubelet.conf that signs every request as the identity.
func TestIdentityBootstrapKubeconfig(t *testing.T) {
	m := renderMap(t, identityConfig(), cases["cgroupv2"])
	if f, ok := m[KubeletKubeconf]; ok {
		t.Fatalf("identity join renders %s, which the kubelet would use instead of bootstrapping:\n%s", KubeletKubeconf, f.Data)
	}
	f, ok := m[BootstrapKubeconf]
	if !ok {
		t.Fatalf("identity join renders no %s", BootstrapKubeconf)
	}
	if f.Secret || f.Mode != 0o600 {
		t.Errorf("%s: secret %v mode %v; it holds no secret, mode 0600", BootstrapKubeconf, f.Secret, f.Mode)
	}
	cfg, err := clientcmd.Load(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if user == nil || user.Exec == nil || user.Token != "" || user.ClientCertificate != "" {
		t.Fatalf("bootstrap user %+v: want the credential plugin only", user)
	}
	if user.Exec.Command != CredentialPlugin || strings.Join(user.Exec.Args, " ") != "token kubelogin --identity-dir "+HostIdentityDir+" --server-id "+AKSServerID {
		t.Errorf("plugin %s %v", user.Exec.Command, user.Exec.Args)
	}
	var kc kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(m[KubeletConfigFile].Data, &kc); err != nil {
		t.Fatal(err)
	}
	if !kc.RotateCertificates {
		t.Error("identity node: rotateCertificates off; its client certificate would expire")
	}
	unit := string(m[KubeletUnitFile].Data)
	if !strings.Contains(unit, "--bootstrap-kubeconfig="+BootstrapKubeconf) || !strings.Contains(unit, "--kubeconfig="+KubeletKubeconf) {
		t.Errorf("kubelet unit does not bootstrap:\n%s", unit)
	}
}

func TestKubeletConfigParses(t *testing.T) {
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			f := renderMap(t, testConfig(), o)[KubeletConfigFile]
			var kc kubeletv1beta1.KubeletConfiguration
			if err := yaml.UnmarshalStrict(f.Data, &kc); err != nil {
				t.Fatal(err)
			}
			if kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Kind != "KubeletConfiguration" {
				t.Errorf("type meta %+v", kc.TypeMeta)
			}
			a := kc.Authentication
			if a.X509.ClientCAFile != ClusterCAFile || a.Webhook.Enabled == nil || !*a.Webhook.Enabled || a.Anonymous.Enabled == nil || *a.Anonymous.Enabled {
				t.Errorf("authentication %+v", a)
			}
			if kc.Authorization.Mode != kubeletv1beta1.KubeletAuthorizationModeWebhook {
				t.Errorf("authorization %+v", kc.Authorization)
			}
			if len(kc.ClusterDNS) != 1 || kc.ClusterDNS[0] != "10.0.0.10" || kc.ClusterDomain != "cluster.local" {
				t.Errorf("dns %v %q", kc.ClusterDNS, kc.ClusterDomain)
			}
			if kc.CgroupDriver != "cgroupfs" || kc.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" {
				t.Errorf("runtime %q %q", kc.CgroupDriver, kc.ContainerRuntimeEndpoint)
			}
			if kc.MaxPods != 110 || *kc.ImageGCHighThresholdPercent != 85 || *kc.ImageGCLowThresholdPercent != 80 {
				t.Errorf("maxPods %d gc %d/%d", kc.MaxPods, *kc.ImageGCHighThresholdPercent, *kc.ImageGCLowThresholdPercent)
			}
			if !kc.RotateCertificates || kc.ServerTLSBootstrap || kc.StaticPodPath != "" || kc.ResolverConfig == nil || *kc.ResolverConfig != "/etc/resolv.conf" {
				t.Errorf("certs/static/resolv %+v", kc)
			}
			if *kc.CgroupsPerQOS != true || *kc.RegisterNode != true || len(kc.EnforceNodeAllocatable) != 1 || kc.EnforceNodeAllocatable[0] != "pods" {
				t.Errorf("qos/register/allocatable %+v", kc)
			}
			if kc.FailSwapOn != nil || len(kc.FeatureGates) != 0 || len(kc.TLSCipherSuites) != 0 {
				t.Errorf("defaults overridden: failSwapOn=%v featureGates=%v", kc.FailSwapOn, kc.FeatureGates)
			}
			if kc.Logging.Verbosity != 2 {
				t.Errorf("verbosity %d", kc.Logging.Verbosity)
			}
			if len(kc.RegisterWithTaints) != 2 || kc.RegisterWithTaints[0].Key != "example.com/dedicated" ||
				kc.RegisterWithTaints[0].Value != "flex" || kc.RegisterWithTaints[0].Effect != "NoSchedule" ||
				kc.RegisterWithTaints[1].Key != "example.com/drain" || kc.RegisterWithTaints[1].Value != "" {
				t.Errorf("taints %+v", kc.RegisterWithTaints)
			}
			switch {
			case o.CgroupV1 && (kc.FailCgroupV1 == nil || *kc.FailCgroupV1):
				t.Errorf("cgroup v1: failCgroupV1 = %v, want false", kc.FailCgroupV1)
			case !o.CgroupV1 && kc.FailCgroupV1 != nil:
				t.Errorf("cgroup v2: failCgroupV1 = %v, want unset", *kc.FailCgroupV1)
			}
		})
	}
	// An explicit knob wins over the cgroup mode's default.
	tr := true
	f := renderMap(t, testConfig(), Options{CgroupV1: true, FailCgroupV1: &tr})[KubeletConfigFile]
	if !bytes.Contains(f.Data, []byte("failCgroupV1: true\n")) {
		t.Errorf("FailCgroupV1=true ignored:\n%s", f.Data)
	}
}

func TestContainerdConfigParses(t *testing.T) {
	for name, o := range map[string]Options{
		"restricted": {RestrictOOMScoreAdj: true},
		"default":    {},
		"systemd":    {CgroupDriver: "systemd"},
	} {
		t.Run(name, func(t *testing.T) {
			f := renderMap(t, testConfig(), o)[ContainerdConfig]
			var cfg map[string]any
			if err := toml.Unmarshal(f.Data, &cfg); err != nil {
				t.Fatal(err)
			}
			get := func(path ...string) any {
				var v any = cfg
				for _, k := range path {
					m, ok := v.(map[string]any)
					if !ok {
						t.Fatalf("%v: %s is not a table", path, k)
					}
					v = m[k]
				}
				return v
			}
			cri := []string{"plugins", "io.containerd.grpc.v1.cri"}
			runc := append(append([]string{}, cri...), "containerd", "runtimes", "runc")
			checks := map[string]struct{ got, want any }{
				"version":                {get("version"), int64(2)},
				"restrict_oom_score_adj": {get(append(cri, "restrict_oom_score_adj")...), o.RestrictOOMScoreAdj},
				"sandbox_image":          {get(append(cri, "sandbox_image")...), "mcr.microsoft.com/oss/kubernetes/pause:3.10"},
				"runtime_type":           {get(append(runc, "runtime_type")...), "io.containerd.runc.v2"},
				"BinaryName":             {get(append(runc, "options", "BinaryName")...), "/usr/local/sbin/runc"},
				"SystemdCgroup":          {get(append(runc, "options", "SystemdCgroup")...), o.CgroupDriver == "systemd"},
				"bin_dir":                {get(append(cri, "cni", "bin_dir")...), "/opt/cni/bin"},
				"conf_dir":               {get(append(cri, "cni", "conf_dir")...), "/etc/cni/net.d"},
				"grpc.address":           {get("grpc", "address"), "/run/containerd/containerd.sock"},
			}
			for k, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %#v, want %#v", k, c.got, c.want)
				}
			}
		})
	}
}

func TestKubeletUnitFlags(t *testing.T) {
	c := testConfig()
	unit := string(renderMap(t, c, Options{})[KubeletUnitFile].Data)
	for _, want := range []string{
		"--hostname-override=node-1",
		"--node-ip=127.0.0.2",
		"--node-labels=example.com/pool=flex,tier=,topology.kubernetes.io/zone=z1",
		"After=containerd.service\nRequires=containerd.service\n",
		"Restart=always\nRestartSec=5\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("kubelet unit lacks %q:\n%s", want, unit)
		}
	}
	// Flags the config file has are deprecated on the command line.
	for _, not := range []string{"--register-with-taints", "--v=", "--cgroup-driver"} {
		if strings.Contains(unit, not) {
			t.Errorf("kubelet unit has %q", not)
		}
	}
	unit = string(renderMap(t, c, Options{NodeIP: "127.0.0.3"})[KubeletUnitFile].Data)
	if !strings.Contains(unit, "--node-ip=127.0.0.3 ") {
		t.Errorf("Options.NodeIP not used:\n%s", unit)
	}
	c.Node.Kubelet.NodeIP, c.Node.Labels = "", nil
	unit = string(renderMap(t, c, Options{})[KubeletUnitFile].Data)
	if strings.Contains(unit, "--node-ip") || strings.Contains(unit, "--node-labels") {
		t.Errorf("empty node IP or labels still passed:\n%s", unit)
	}
}

func TestCNIConfig(t *testing.T) {
	f := renderMap(t, testConfig(), Options{PodCIDR: "10.244.7.9/24"})[CNIConfFile]
	if !bytes.Contains(f.Data, []byte(`"subnet": "10.244.7.0/24"`)) {
		t.Errorf("pod CIDR not normalised to its network:\n%s", f.Data)
	}
	f = renderMap(t, testConfig(), Options{PodCIDR: "fd00:10:244::/64"})[CNIConfFile]
	if !bytes.Contains(f.Data, []byte(`"dst": "::/0"`)) {
		t.Errorf("IPv6 range without an IPv6 default route:\n%s", f.Data)
	}
}

func TestRenderRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*config.Config, *Options)
		want   string
	}{
		"no token":        {func(c *config.Config, _ *Options) { c.Azure.BootstrapToken = nil }, "azure: no authentication method"},
		"no server":       {func(c *config.Config, _ *Options) { c.Node.Kubelet.ClusterFQDN = "" }, "node.kubelet.clusterFQDN"},
		"no CA":           {func(c *config.Config, _ *Options) { c.Node.Kubelet.CACertData = "" }, "node.kubelet.caCertData"},
		"bad node name":   {func(c *config.Config, _ *Options) { c.Agent.NodeName = "a b" }, "agent.nodeName"},
		"specifier label": {func(c *config.Config, _ *Options) { c.Node.Labels = map[string]string{"a": "%n"} }, "node.labels.a"},
		"comma label":     {func(c *config.Config, _ *Options) { c.Node.Labels = map[string]string{"a": "b,c=d"} }, "node.labels.a"},
		"bad taint":       {func(c *config.Config, _ *Options) { c.Node.Taints = []string{"a=b:Sometimes"} }, "node.taints"},
		"bad driver":      {func(_ *config.Config, o *Options) { o.CgroupDriver = "cgroup" }, "cgroup driver"},
		"bad pod CIDR":    {func(_ *config.Config, o *Options) { o.PodCIDR = "10.244.0.0" }, "pod CIDR"},
		"bad NPROC":       {func(_ *config.Config, o *Options) { o.ContainerdLimitNPROC = "lots" }, "LimitNPROC"},
		"bad domain":      {func(_ *config.Config, o *Options) { o.ClusterDomain = "Cluster Local" }, "cluster domain"},
		"bad node IP":     {func(_ *config.Config, o *Options) { o.NodeIP = "node" }, "node IP"},
	} {
		t.Run(name, func(t *testing.T) {
			c, o := testConfig(), Options{}
			tc.mutate(c, &o)
			_, err := Render(c, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}

type fileState struct {
	mode  fs.FileMode
	mtime time.Time
	link  string
}

func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		s := fileState{mode: fi.Mode(), mtime: fi.ModTime()}
		if fi.Mode()&fs.ModeSymlink != 0 {
			s.link, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(root, p)
		m["/"+filepath.ToSlash(rel)] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWriteIdempotent(t *testing.T) {
	root := t.TempDir()
	c, o := testConfig(), cases["cgroupv1"]
	changed, files, err := Write(root, c, o)
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Error("first Write reported changed=false")
	}
	rendered := renderMap(t, c, o)
	if len(files) != len(rendered) {
		t.Errorf("Write listed %d paths, Render has %d", len(files), len(rendered))
	}
	before := snapshot(t, root)
	for _, p := range files {
		f, s := rendered[p], before[p]
		switch {
		case f.Link != "":
			if s.link != f.Link {
				t.Errorf("%s -> %q, want %q", p, s.link, f.Link)
			}
		case s.mode.Perm() != f.Mode || !s.mode.IsRegular():
			t.Errorf("%s mode %v, want %o", p, s.mode, f.Mode)
		default:
			data, _ := os.ReadFile(filepath.Join(root, p))
			if !bytes.Equal(data, f.Data) {
				t.Errorf("%s content differs from Render", p)
			}
		}
	}

	// Coarse mtime granularity would hide a rewrite; wait it out.
	time.Sleep(20 * time.Millisecond)
	changed, files2, err := Write(root, c, o)
	if err != nil {
		t.Fatal(err)
	}
	if changed {
		t.Error("converged Write reported changed=true")
	}
	if strings.Join(files, " ") != strings.Join(files2, " ") {
		t.Errorf("file list changed: %v then %v", files, files2)
	}
	after := snapshot(t, root)
	if len(after) != len(before) {
		t.Errorf("converged Write left %d entries, had %d (stray temp files?)", len(after), len(before))
	}
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s rewritten: %+v then %+v", p, s, after[p])
		}
	}

	// One changed input rewrites only what depends on it.
	c.Networking.DNSServiceIP = "10.0.0.53"
	if changed, _, err := Write(root, c, o); err != nil || !changed {
		t.Fatalf("changed DNS IP: changed=%v err=%v", changed, err)
	}
	after2 := snapshot(t, root)
	for p, s := range after {
		if rewritten := after2[p].mtime != s.mtime; rewritten != (p == KubeletConfigFile) && s.mode.IsRegular() {
			t.Errorf("%s rewritten=%v after a DNS IP change", p, rewritten)
		}
	}
}

func TestWriteConvergesCgroupMode(t *testing.T) {
	root := t.TempDir()
	if _, _, err := Write(root, testConfig(), Options{CgroupV1: true}); err != nil {
		t.Fatal(err)
	}
	changed, files, err := Write(root, testConfig(), Options{})
	if err != nil || !changed {
		t.Fatalf("switch to cgroup v2: changed=%v err=%v", changed, err)
	}
	for _, p := range []string{CgroupRWScript, CgroupRWUnitFile, wantsDir + "/" + CgroupRWUnitName} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left behind on cgroup v2 (err %v)", p, err)
		}
		for _, f := range files {
			if f == p {
				t.Errorf("%s still listed", p)
			}
		}
	}
	if changed, _, err := Write(root, testConfig(), Options{}); err != nil || changed {
		t.Errorf("converged cgroup v2 Write: changed=%v err=%v", changed, err)
	}
}

func TestWriteErrorOmitsToken(t *testing.T) {
	root := t.TempDir()
	// /etc a file: nothing under it can be written.
	if err := os.WriteFile(filepath.Join(root, "etc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Write(root, testConfig(), Options{})
	if err == nil {
		t.Fatal("Write under a file succeeded")
	}
	if strings.Contains(err.Error(), testToken) || !strings.Contains(err.Error(), root) {
		t.Errorf("error %q: want the machine root and not the token", err)
	}
}

// TestCgroupScriptShellcheck lints the script as POSIX sh. Where the e2e
// suite runs (AKS_FLEX_NODE_E2E=1) shellcheck must be installed.
func TestCgroupScriptShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		if os.Getenv("AKS_FLEX_NODE_E2E") == "1" {
			t.Fatal("shellcheck not on PATH; AKS_FLEX_NODE_E2E=1 requires it")
		}
		t.Skip("shellcheck not on PATH")
	}
	script := filepath.Join(t.TempDir(), "cgroup-rw.sh")
	if err := os.WriteFile(script, renderMap(t, testConfig(), Options{CgroupV1: true})[CgroupRWScript].Data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sc, "-s", "sh", script).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// TestCgroupScriptSelects runs the script with the mount table and the
// mount command replaced by fixtures, to check which mounts it remounts.
func TestCgroupScriptSelects(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	mountinfo := filepath.Join(dir, "mountinfo")
	// A cgroup v1 hybrid machine as nspawn sets it up: read-only tmpfs and
	// controllers, the machine's own systemd subtree writable, cpu and
	// cpuacct only as a joint mount, an optional-fields-free line, and
	// mounts that must be left alone.
	table := `100 90 0:50 / / rw,relatime master:1 - overlay overlay rw
101 100 0:60 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:2 - tmpfs tmpfs ro,mode=755
102 101 0:61 / /sys/fs/cgroup/unified ro,nosuid,nodev,noexec,relatime shared:3 - cgroup2 cgroup2 rw
103 101 0:62 / /sys/fs/cgroup/systemd ro,nosuid,nodev,noexec,relatime shared:4 - cgroup cgroup rw,xattr,name=systemd
104 103 0:62 /machine.slice/kube1 /sys/fs/cgroup/systemd/machine.slice/kube1 rw,nosuid - cgroup cgroup rw,name=systemd
105 101 0:63 / /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup rw,cpu,cpuacct
106 101 0:64 / /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
107 101 0:65 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:6 - cgroup cgroup rw,pids
108 100 0:66 / /sys/fs/cgroupx ro,relatime - cgroup cgroup rw,blkio
109 100 0:67 / /proc ro,relatime - proc proc ro
`
	if err := os.WriteFile(mountinfo, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "mount.log")
	stub := "#!/bin/sh\necho \"$*\" >>" + log + "\n"
	if err := os.WriteFile(filepath.Join(dir, "mount"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	rendered := string(renderMap(t, testConfig(), Options{CgroupV1: true})[CgroupRWScript].Data)
	script := strings.Replace(rendered, "</proc/self/mountinfo", "<"+mountinfo, 1)
	if script == rendered {
		t.Fatal("script no longer reads /proc/self/mountinfo")
	}
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(log)
	want := `-o remount,bind,rw /sys/fs/cgroup
-o remount,bind,rw /sys/fs/cgroup/unified
-o remount,bind,rw /sys/fs/cgroup/systemd
-o remount,bind,rw /sys/fs/cgroup/cpu,cpuacct
-o remount,bind,rw /sys/fs/cgroup/memory
`
	if string(got) != want {
		t.Errorf("remounted:\n%s\nwant:\n%s", got, want)
	}

	// Converged: nothing read-only, nothing remounted, still success.
	if err := os.WriteFile(mountinfo, []byte(strings.ReplaceAll(table, " ro,", " rw,")), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(log)
	cmd = exec.Command(sh, "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("converged script: %v\n%s", err, out)
	}
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		got, _ := os.ReadFile(log)
		t.Errorf("converged run remounted:\n%s", got)
	}
}

func TestDetectRestrictOOMScoreAdj(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		status string
		want   bool
	}{
		"full root":           {"Name:\tx\nCapEff:\t000001ffffffffff\n", false},
		"no CAP_SYS_RESOURCE": {"CapEff:\t000001fffeffffff\n", true},
		"no caps":             {"CapEff:\t0000000000000000\n", true},
		"no CapEff line":      {"Name:\tx\n", false},
		"garbage":             {"CapEff:\tzz\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.status), 0o644); err != nil {
				t.Fatal(err)
			}
			old := procSelfStatus
			procSelfStatus = p
			defer func() { procSelfStatus = old }()
			if got := DetectRestrictOOMScoreAdj(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// The real one must not panic and must leave oom_score_adj alone.
	before, _ := os.ReadFile("/proc/self/oom_score_adj")
	_ = DetectRestrictOOMScoreAdj()
	if after, _ := os.ReadFile("/proc/self/oom_score_adj"); !bytes.Equal(before, after) {
		t.Errorf("oom_score_adj changed: %q -> %q", before, after)
	}
}

// Without networking.podCIDR (or Options.PodCIDR) there is no range to
// put in the bridge config: Render leaves it out, and WriteCNIConfig
// writes it once the Node's range is known.
func TestPodCIDRFromTheNode(t *testing.T) {
	c := testConfig()
	c.Networking.PodCIDR = ""
	if _, ok := renderMap(t, c, Options{})[CNIConfFile]; ok {
		t.Fatal("a CNI config rendered without a pod CIDR")
	}
	root := t.TempDir()
	changed, err := WriteCNIConfig(root, c, "10.244.5.0/24")
	if err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	data, err := os.ReadFile(filepath.Join(root, CNIConfFile))
	if err != nil || !bytes.Contains(data, []byte(`"subnet": "10.244.5.0/24"`)) {
		t.Fatalf("conflist %s: %v", data, err)
	}
	if changed, err := WriteCNIConfig(root, c, "10.244.5.0/24"); err != nil || changed {
		t.Fatalf("second write: %v %v", changed, err)
	}
	if _, err := WriteCNIConfig(root, c, "10.244.5.0"); err == nil {
		t.Fatal("want an error for a bad CIDR")
	}
}

// Package fleet is more than one flex node against one control plane: two
// ACL-like hosts and a Debian host, each in its own network namespace on a
// bridge the test made (lab_test.go), join at the same moment in bridge
// mode with the pod CIDRs the controller manager allocates
// (--allocate-node-cidrs): the Debian host and one ACL-like host by
// `start`, the other ACL-like host provisioned entirely by the real
// Ignition from `ignition render` and joined by its first-boot unit. A pod on each node reaches a pod on each other
// node by pod IP, and the pod answering sees the asking pod's own address
// (no masquerade between pod networks); Node objects an admin writes to
// route half of IPv4 or the metadata endpoint through them, or with an
// InternalIP off the hosts' subnet, change no host's routes or masquerade
// (hostile_test.go); deleting a Node removes the routes
// to it on the others within seconds; after reset each host's network is
// as it was before the join.
package fleet

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
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/ignitiontest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// bundleDir is where each host sees the bundle `artifacts build` made.
const bundleDir = "/var/lib/aks-flex-node-test/bundle"

// spec is one host of the fleet.
type spec struct {
	name    string
	variant aclhost.Variant
	prefix  string
	agent   string
	// ignition: provisioned by the real Ignition from `ignition render`,
	// joined by its first-boot unit; no start by hand.
	ignition bool
	// proxyMode is networking.kubeProxyMode ("" leaves it to the host);
	// every host runs the agent's kube-proxy (services_test.go).
	proxyMode string
}

var specs = []spec{
	{name: "fleet-acl-1", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node"},
	{name: "fleet-ign", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node", ignition: true, proxyMode: "nftables"},
	{name: "fleet-debian", variant: aclhost.Debian, agent: "/usr/local/bin/aks-flex-node"},
}

// member is a booted host of the fleet.
type member struct {
	spec
	h         *aclhost.Host
	ip        string
	podCIDR   string
	netBefore netState
}

// fleet is what the hosts share.
type fleet struct {
	ctx      context.Context
	cp       *controlplane.ControlPlane
	lab      *lab
	dist     string
	bundle   string
	manifest fixtures.Manifest
	members  []*member
	// labHosts is how many host namespaces setUp makes; 0: one per spec.
	labHosts int
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestFleet(t *testing.T) {
	ignitiontest.Require(t)
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	f := &fleet{ctx: ctx}
	f.setUp(t)
	t.Logf("BENCH fleet setup=%v", time.Since(begin).Round(time.Millisecond))
	f.members = make([]*member, len(specs))
	for i, s := range specs {
		if !s.ignition {
			f.members[i] = f.boot(t, s, f.lab.hosts[i])
		}
	}
	f.joinAll(t)
	f.checkPodCIDRs(t)
	f.waitRoutes(t, f.members)
	t.Run("HostileNodeObject", f.checkHostileNodes)
	f.checkPodToPod(t)
	f.checkServices(t)
	gone := f.members[len(f.members)-1]
	f.checkNodeDeletion(t, gone)
	f.checkResets(t)
	t.Logf("BENCH fleet total=%v", time.Since(begin).Round(time.Millisecond))
}

// setUp builds or reuses the fixtures (cached), makes the lab network,
// starts the control plane on the lab's link and builds the agent and
// the bundle the hosts install from.
func (f *fleet) setUp(t *testing.T) {
	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl", "kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	layoutDir, _, err := fixtures.WorkerImage(f.ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	fixtureBundle, manifest, err := fixtures.Bundle(f.ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubeProxyPath: binDir + "/kube-proxy", KubernetesVersion: "1.35.4"})
	if err != nil {
		t.Fatal(err)
	}
	f.manifest = manifest
	n := len(specs)
	if f.labHosts > 0 {
		n = f.labHosts
	}
	f.lab = newLab(t, n)
	if f.cp, err = controlplane.Start(f.ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: f.lab.link.Outer, Logf: t.Logf}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			f.cp.DumpLogs(os.Stderr)
		}
		_ = f.cp.Stop()
	})
	f.dist = t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", f.dist+"/aks-flex-node", "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
	specJSON, _ := json.MarshalIndent(fixtures.BuildSpec(manifest), "", "  ")
	specPath := filepath.Join(t.TempDir(), "bundle-spec.json")
	if err := os.WriteFile(specPath, specJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	f.bundle = filepath.Join(t.TempDir(), "bundle")
	f.cli(t, "artifacts", "build", "--manifest", specPath, "--from-dir", fixtureBundle, "--worker-image", layoutDir, "--output-dir", f.bundle)
}

// cli runs the agent binary on this machine, as an admin would.
func (f *fleet) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(f.ctx, f.dist+"/aks-flex-node", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("aks-flex-node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// boot starts a host on its lab namespace with the bundle bound in, an
// empty resolv.conf (nothing to resolve, nowhere to go), the agent and
// the scripts in /root/dist and its config; journals are logged when the
// test fails.
func (f *fleet) boot(t *testing.T, s spec, lh labHost) *member {
	h := aclhost.MustStart(t, aclhost.Options{Variant: s.variant, Name: s.name, NetNS: lh.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + f.bundle + ":" + bundleDir,
	}})
	f.logOnFailure(t, s.name, h)
	h.ShellOK(t, "rm -f /etc/resolv.conf && : > /etc/resolv.conf")
	for src, dst := range map[string]string{
		f.dist + "/aks-flex-node":                          "/root/dist/aks-flex-node",
		filepath.Join(repoRoot(), "scripts", "install.sh"): "/root/dist/install.sh",
	} {
		if err := h.CopyIn(src, dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.WriteFile("/etc/aks-flex-node/config.json", f.config(t, s, lh.IP), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &member{spec: s, h: h, ip: lh.IP}
	m.netBefore = snapshotNet(t, h)
	return m
}

// logOnFailure logs the host's agent, its machine's kubelet and
// containerd, and its routes and nft when the test fails (registered
// after the host, so it runs before the host stops).
func (f *fleet) logOnFailure(t *testing.T, name string, h *aclhost.Host) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		a, _, _ := h.Run(context.Background(), "journalctl", "--no-pager", "-n", "60", "-u", "aks-flex-node-agent", "-u", firstBootUnit)
		t.Logf("%s: agent:\n%s", name, a)
		for _, unit := range []string{"kubelet", "containerd"} {
			j, _, _ := h.Run(context.Background(), "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "60", "-u", unit)
			t.Logf("%s: %s in kube1:\n%s", name, unit, j)
		}
		r, _, _ := h.Run(context.Background(), "sh", "-c", "ip route; nft list ruleset")
		t.Logf("%s: routes and nft:\n%s", name, r)
	})
}

// config is the host's bootstrap-token config as an admin makes it:
// `cluster prepare --bootstrap-token` applied, then `config generate`
// from a kubeconfig of the cluster, plus the bundle's versions and the
// node's IP. No networking.podCIDR: the Node's is used.
func (f *fleet) config(t *testing.T, s spec, ip string) []byte {
	dir := t.TempDir()
	tokenFile, prepared, kubeconfig := filepath.Join(dir, "token"), filepath.Join(dir, "prepare.yaml"), filepath.Join(dir, "kubeconfig")
	f.cli(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile, "--ttl", "1h", "--output", prepared)
	if out, err := f.cp.Kubectl(f.ctx, nil, "apply", "-f", prepared); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: %s\n    certificate-authority-data: %s\ncontexts:\n- name: e2e\n  context: {cluster: e2e, user: admin}\ncurrent-context: e2e\nusers:\n- name: admin\n  user: {token: unused}\n",
		f.cp.Server, base64.StdEncoding.EncodeToString(f.cp.CAPEM))
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	generated := filepath.Join(dir, "config.json")
	args := []string{"config", "generate", "--kubeconfig", kubeconfig, "--auth", "bootstrap-token", "--token-file", tokenFile,
		"--node-name", s.name, "--offline-artifacts", bundleDir, "--output", generated}
	if s.prefix != "" {
		args = append(args, "--host-prefix", s.prefix)
	}
	f.cli(t, args...)
	data, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	c := f.manifest.Components
	cfg["components"] = map[string]any{"kubernetes": c.Kubernetes, "containerd": c.Containerd, "runc": c.Runc, "sandboxImage": fixtures.PauseImageRef}
	cfg["networking"] = proxyNetworking(s, c.CNI)
	cfg["node"].(map[string]any)["kubelet"].(map[string]any)["nodeIP"] = ip
	out, _ := json.MarshalIndent(cfg, "", "  ")
	return out
}

// joinAll installs the agent on every host booted by hand, then at the
// same moment runs start on each and boots the Ignition host (whose
// first-boot unit joins it), and waits for every Node to be Ready.
func (f *fleet) joinAll(t *testing.T) {
	ign := map[int]string{}
	for i, s := range specs {
		if s.ignition {
			ign[i] = f.renderIgnition(t, s, f.lab.hosts[i].IP)
			continue
		}
		m := f.members[i]
		m.h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256Hex(t, f.dist+"/aks-flex-node"))
	}
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	took := make([]time.Duration, len(specs))
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := time.Now()
			defer func() { took[i] = time.Since(b) }()
			if s.ignition {
				f.members[i], errs[i] = f.bootIgnition(t, s, f.lab.hosts[i], ign[i])
				return
			}
			_, stderr, err := f.members[i].h.Run(f.ctx, s.agent, "start", "--join-timeout", "3m")
			if err != nil {
				errs[i] = fmt.Errorf("%s: start: %w\n%s", s.name, err, stderr)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range f.members {
		if m.ignition {
			checkFirstBootJoined(t, m)
		}
		kubetest.WaitReady(f.ctx, t, f.cp.Client, m.name, 2*time.Minute)
		kind := "start"
		if m.ignition {
			kind = "ignition-boot-to-joined"
		}
		t.Logf("BENCH fleet host=%s %s=%v", m.name, kind, took[i].Round(time.Millisecond))
	}
	t.Logf("BENCH fleet all-ready=%v hosts=%d", time.Since(begin).Round(time.Millisecond), len(f.members))
}

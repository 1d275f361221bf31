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
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/entratest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/e2e/netsnap"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func buildAgent(t *testing.T, out string) { buildAgentVersion(t, out, "v1.0.0-e2e") }

func buildAgentVersion(t *testing.T, out, version string) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version="+version, "./cmd/aks-flex-node")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
}

// helloCommand is what the test pods run; their logs must say it.
var helloCommand = []string{"sh", "-c", "echo hello from aks-flex-node"}

// scenario is one kind of host joining.
type scenario struct {
	name     string
	variant  aclhost.Variant
	prefix   string
	agent    string // where install.sh puts the binary for this layout
	current  string // the upgrade link the agent unit runs
	nodeName string
	// oci: the bundle comes from the site registry (oci://), else from a
	// directory on the host.
	oci bool
	// auth is how the node signs in on its first join; again how it
	// signs in when it joins afresh after reset and uninstall.
	auth, again string
	// upstreamAgain: the fresh join takes its components from the
	// bundle in upstream's layout (upstream_test.go).
	upstreamAgain bool
}

// The ACL host joins with a managed identity (IMDS inside its network
// namespace), then afresh with a bootstrap token an admin made with
// `cluster prepare`; the Debian host with a service principal's secret,
// then its certificate.
var scenarios = []scenario{
	{name: "acl", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node", current: "/opt/aks-flex-node/lib/current", nodeName: "acl-node-1", oci: true, auth: "msi", again: "bootstrap-token"},
	{name: "debian", variant: aclhost.Debian, prefix: "", agent: "/usr/local/bin/aks-flex-node", current: "/usr/local/lib/aks-flex-node/current", nodeName: "debian-node-1", auth: "sp-secret", again: "sp-cert", upstreamAgain: true},
}

// env is what every scenario shares: one control plane, the fixtures and
// the agent binary. The worker image (layoutDir, built by `aks-flex-node
// image build` from Debian packages) reaches the hosts only inside the
// bundle: the configs name no bootstrap.ociImage.
type env struct {
	ctx       context.Context
	cp        *controlplane.ControlPlane
	binDir    string
	layoutDir string
	bundle    string
	manifest  fixtures.Manifest
	dist      string
	net       *netlab.Link
	registry  *siteRegistry
	// ociBundle is the bundle `artifacts build` made and `artifacts push`
	// published; tampered is the source of its tampered copy.
	ociBundle string
	tampered  string
	// tamperedDir is a local copy of the bundle with the kubelet changed.
	tamperedDir string
	// upstream is the bundle in upstream's layout, upstreamTampered its
	// copy with the kubelet changed.
	upstream, upstreamTampered string
	// entra is the fake Entra tenant whose tokens the API server accepts.
	entra *entratest.Entra
	// lastStart is when the last start began.
	lastStart time.Time
}

func TestJoin(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := &env{ctx: ctx}
	var err error
	if e.binDir, err = controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl"); err != nil {
		t.Fatal(err)
	}
	if e.layoutDir, _, err = fixtures.WorkerImage(ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
	if e.bundle, e.manifest, err = fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: e.binDir + "/kubelet", KubectlPath: e.binDir + "/kubectl", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	e.net = netlab.New(t)
	e.entra = entratest.Start(t, e.net)
	if e.cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: e.binDir, WorkDir: t.TempDir(), AdvertiseAddress: e.net.Outer, Logf: t.Logf,
		AuthenticationConfig: e.entra.AuthenticationConfig()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.cp.DumpLogs(os.Stderr)
		}
		_ = e.cp.Stop()
	})
	e.dist = t.TempDir()
	buildAgent(t, e.dist+"/aks-flex-node")
	e.registry = startRegistry(t, e.net.NS)
	e.ociBundle = publishBundle(t, e.dist+"/aks-flex-node", e.bundle, e.layoutDir, e.manifest, e.registry)
	e.tampered = publishTampered(t, e.registry, e.ociBundle, e.manifest)
	e.tamperedDir = tamperedCopy(t, e.ociBundle, e.manifest)
	e.prepareUpstream(t)
	// One scenario is picked with -run '^TestJoin$/^acl$' (docs/testing.md);
	// subtests -run leaves out do not run.
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { e.run(t, sc) })
	}
	t.Run(crashScenario.name, e.crash)
}

// cfgParts are the sections a config edit may change.
type cfgParts struct{ azure, kubelet, agent, bootstrap map[string]any }

// config is the scenario's config signing in with auth; edit, when set,
// changes it first.
func (e *env) config(sc scenario, auth string, edit func(p *cfgParts)) []byte {
	p := &cfgParts{
		azure:     e.azure(auth),
		kubelet:   map[string]any{"clusterFQDN": strings.TrimPrefix(e.cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(e.cp.CAPEM), "nodeIP": e.net.Inner},
		agent:     map[string]any{"nodeName": sc.nodeName},
		bootstrap: map[string]any{"offlineArtifacts": map[string]any{"source": e.source(sc)}},
	}
	if sc.prefix != "" {
		p.agent["hostPrefix"] = sc.prefix
	}
	if edit != nil {
		edit(p)
	}
	doc := map[string]any{
		"azure":      p.azure,
		"agent":      p.agent,
		"components": e.components(),
		"networking": map[string]any{"cniVersion": e.manifest.Components.CNI},
		"bootstrap":  p.bootstrap,
		"node":       map[string]any{"kubelet": p.kubelet},
	}
	if hr := e.hostRouting(sc); hr != nil {
		doc["hostRouting"] = hr
	}
	cfg, _ := json.MarshalIndent(doc, "", "  ")
	return cfg
}

// source is where the scenario's bundle comes from.
func (e *env) source(sc scenario) string {
	if sc.oci {
		return "oci://" + e.registry.Inner + "/" + bundleRepo + ":k8s-{{ .KubernetesVersion }}"
	}
	return "/var/lib/aks-flex-node-test/bundle"
}

func (e *env) components() map[string]any {
	m := e.manifest.Components
	return map[string]any{"kubernetes": m.Kubernetes, "containerd": m.Containerd, "runc": m.Runc, "sandboxImage": fixtures.PauseImageRef}
}

// run is one scenario: a host that refuses bad inputs without changing
// anything, joins through install.sh and start on the worker image the
// bundle carries, runs a pod, converges on a second start, survives a
// power cut, joins again after a reset that kept the image's layers (the
// warm join), and is left clean by reset and uninstall.
func (e *env) run(t *testing.T, sc scenario) {
	step("Boot an ACL-like host (read-only /usr, ACL os-release) with agent.hostPrefix %s", sc.prefix)
	h := e.bootHost(t, sc)
	if sc.variant == aclhost.ACL {
		step("Bad inputs are refused by preflight before anything on the host changes")
		e.refusals(t, h, sc)
	} else {
		e.spRefusals(t, h, sc)
	}
	addSwapFile(t, h)
	before, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	netBefore := netsnap.Take(t, h)

	e.grant(t, sc.auth)
	step("Install the agent with install.sh")
	e.install(t, h)
	step("Join: aks-flex-node start")
	_, first := e.start(t, h, sc, "first")
	kubetest.WaitReadySince(e.ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)
	firstReady := time.Since(e.lastStart)
	e.checkJoined(t, h, sc)
	e.checkStaticRoute(t, h, sc)
	checkSwapKeptOff(t, h, "after the join")
	e.checkNoSecrets(t, h, sc)
	second, hashed := e.checkConverged(t, h, sc)
	kind := "local-dir"
	if sc.oci {
		kind = "oci"
	}
	t.Logf("BENCH converged-rerun source=%s duration=%v bytes-hashed=%d", kind, second.Round(time.Millisecond), hashed)
	if !sc.oci {
		e.checkConvergedSources(t, h, sc)
	}
	if sc.auth == "msi" {
		e.checkPluginFollowsUpgrade(t, h, sc)
	}
	// After the plugin check: agent-upgrade restarts the agent, so its
	// pid is read here.
	pid := strings.TrimSpace(h.RunOK(t, "systemctl", "show", "-p", "MainPID", "--value", "aks-flex-node-agent.service"))
	rss, _, _ := h.Run(e.ctx, "sh", "-c", "grep VmRSS /proc/"+pid+"/status")
	t.Logf("BENCH scenario=%s auth=%s join=%v start-to-ready=%v converged-rerun=%v agent-%s", sc.name, sc.auth, first.Round(time.Millisecond), firstReady.Round(time.Millisecond), second.Round(time.Millisecond), strings.Join(strings.Fields(rss), " "))
	idleCPU(t, h, pid)
	e.checkPowerCutRecovery(t, h, sc)
	checkSwapKeptOff(t, h, "after the power cut")

	// Reset keeping the worker image's unpacked layers: the next start
	// makes the machine from them (and, for the registry bundle, checks
	// the image contract on their indexes instead of downloading it).
	h.RunOK(t, sc.agent, "reset", "--keep-image-cache")
	out, warm := e.start(t, h, sc, "warm")
	// Ready as the new kubelet posts it: the Node still says Ready from
	// before the reset.
	kubetest.WaitReadySince(e.ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)
	warmReady := time.Since(e.lastStart)
	if !strings.Contains(out, "from the offline bundle") {
		t.Errorf("start did not say the worker image came from the bundle:\n%s", out)
	}
	t.Logf("BENCH scenario=%s warm-join=%v warm-start-to-ready=%v", sc.name, warm.Round(time.Millisecond), warmReady.Round(time.Millisecond))

	checkResetAndUninstallLeaveNothing(t, h, sc, before, netBefore)

	// A fresh start joins again, signing in the other way.
	switch sc.again {
	case "bootstrap-token":
		if err := h.WriteFile("/etc/aks-flex-node/config.json", e.bootstrapTokenConfig(t, sc), 0o600); err != nil {
			t.Fatal(err)
		}
	case "sp-cert":
		if err := h.WriteFile(entratest.SPCertPath, e.entra.SPCertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		var edit func(p *cfgParts)
		if sc.upstreamAgain {
			step("Join afresh from a bundle in upstream's layout")
			e.checkUpstreamVerify(t, h)
			edit = upstreamSource
		}
		if err := h.WriteFile("/etc/aks-flex-node/config.json", e.config(sc, sc.again, edit), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.install(t, h)
	out, fresh := e.start(t, h, sc, "fresh")
	kubetest.WaitReadySince(e.ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)
	if sc.upstreamAgain && !strings.Contains(out, upstreamBundleDir+" (upstream's layout): verified now") {
		t.Errorf("the fresh start's preflight did not verify the upstream-layout bundle:\n%s", out)
	}
	t.Logf("BENCH scenario=%s auth=%s join=%v", sc.name, sc.again, fresh.Round(time.Millisecond))
	h.RunOK(t, sc.agent, "reset")
}

// bootHost boots the scenario's host in the test's network namespace with
// the fixtures bound in, and puts the agent, the scripts and the config in
// /root/dist and /etc/aks-flex-node.
func (e *env) bootHost(t *testing.T, sc scenario) *aclhost.Host {
	h := aclhost.MustStart(t, aclhost.Options{Variant: sc.variant, Name: sc.name, NetNS: e.net.NS, ExtraArgs: append([]string{
		// The test host's root is an overlay; containerd's overlay
		// snapshotter cannot stack on that, so give the machines a real
		// filesystem, as /var/lib is on a real host.
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + e.ociBundle + ":/var/lib/aks-flex-node-test/bundle",
		"--bind-ro=" + e.tamperedDir + ":/var/lib/aks-flex-node-test/tampered-bundle",
	}, e.upstreamBinds()...)})
	// What the node's machine logged, when a step failed (registered after
	// the host, so it runs before the host stops).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, unit := range []string{"kubelet", "containerd"} {
			j, _, _ := h.Run(context.Background(), "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "80", "-u", unit)
			t.Logf("%s in kube1:\n%s", unit, j)
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.CopyIn(e.dist+"/aks-flex-node", "/root/dist/aks-flex-node", 0o755))
	for _, s := range []string{"install.sh", "uninstall.sh"} {
		must(h.CopyIn(filepath.Join(repoRoot(), "scripts", s), "/root/dist/"+s, 0o755))
	}
	must(h.WriteFile("/etc/aks-flex-node/config.json", e.config(sc, sc.auth, nil), 0o600))
	e.entra.Trust(t, h)
	return h
}

// install runs install.sh with the agent binary and its checksum.
func (e *env) install(t *testing.T, h *aclhost.Host) {
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256File(t, e.dist+"/aks-flex-node"))
}

// start runs `start` and logs its output and its task lines; a failure
// ends the test with the machine's kubelet journal.
func (e *env) start(t *testing.T, h *aclhost.Host, sc scenario, label string) (string, time.Duration) {
	begin := time.Now()
	e.lastStart = begin
	if demoMode() && label == "first" {
		out, err := e.demoStart(h, sc.agent)
		if err != nil {
			t.Fatalf("%s start: %v", label, err)
		}
		return out, time.Since(begin)
	}
	out, stderr, err := h.Run(e.ctx, sc.agent, "start", "--join-timeout", "2m")
	d := time.Since(begin)
	t.Logf("%s start took %v\n%s", label, d.Round(time.Millisecond), out)
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "task=") {
			t.Logf("  %s", l)
		}
	}
	if err != nil {
		j, _, _ := h.Run(e.ctx, "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "120", "-u", "kubelet")
		t.Fatalf("%s start: %v\n%s\nkubelet:\n%s", label, err, stderr, j)
	}
	return out, d
}

// checkJoined: a busybox pod from the bundle runs and its logs come back
// through the API server; with a prefix nothing was written under /usr;
// the agent unit runs the upgrade link of the layout.
func (e *env) checkJoined(t *testing.T, h *aclhost.Host, sc scenario) {
	logs := kubetest.RunPod(e.ctx, t, e.cp.Client, sc.nodeName, "hello-"+sc.name, fixtures.BusyboxImageRef, helloCommand, 2*time.Minute)
	if strings.TrimSpace(logs) != "hello from aks-flex-node" {
		t.Errorf("pod logs %q", logs)
	}
	if os.Getenv("AKS_FLEX_NODE_DEMO") == "1" {
		e.demo(t, h, sc, logs)
	}
	if sc.prefix != "" {
		changes, err := h.ChangesUnder("/usr")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range changes {
			t.Errorf("written under /usr: %s", c)
		}
	}
	if exe := h.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", "aks-flex-node-agent.service"); !strings.Contains(exe, "path="+sc.current) {
		t.Errorf("agent ExecStart: %s", exe)
	}
}

// checkConverged: a second start on the converged host changes nothing
// and says so; it returns how long that start took and how many bytes it
// hashed, as start counted them.
func (e *env) checkConverged(t *testing.T, h *aclhost.Host, sc scenario) (time.Duration, int64) {
	out, d := e.start(t, h, sc, "second")
	if !strings.Contains(out, "nothing changed") {
		t.Errorf("second start did not report convergence:\n%s", out)
	}
	n := int64(-1)
	if m := hashedRE.FindStringSubmatch(out); m != nil {
		n, _ = strconv.ParseInt(m[1], 10, 64)
	} else {
		t.Errorf("second start did not say how many bytes it hashed:\n%s", out)
	}
	// Issue 20: a converged re-run re-hashes nothing that has not
	// changed. Its duration is a benchmark figure, not checked here.
	if n > 0 {
		t.Errorf("converged start hashed %d bytes again; want 0:\n%s", n, out)
	}
	if !strings.Contains(out, "verified (unchanged since ") && !sc.oci {
		t.Errorf("second start's preflight did not find the bundle unchanged:\n%s", out)
	}
	return d, n
}

var hashedRE = regexp.MustCompile(`nothing changed \([^,]+, (\d+) bytes hashed\)`)

// checkConvergedSources: the same bundle named as file:///path, or
// through a link to its directory (/srv/bundles/current, say), is the
// same bundle: a start with either is converged too and hashes nothing
// again. The config is put back and the link removed afterwards.
func (e *env) checkConvergedSources(t *testing.T, h *aclhost.Host, sc scenario) {
	h.RunOK(t, "ln", "-sfn", "bundle", "/var/lib/aks-flex-node-test/bundle-current")
	defer h.RunOK(t, "rm", "-f", "/var/lib/aks-flex-node-test/bundle-current")
	for _, src := range []struct{ kind, source string }{
		{"file", "file:///var/lib/aks-flex-node-test/bundle"},
		{"local-link", "/var/lib/aks-flex-node-test/bundle-current"},
	} {
		cfg := e.config(sc, sc.auth, func(p *cfgParts) {
			p.bootstrap["offlineArtifacts"] = map[string]any{"source": src.source}
		})
		if err := h.WriteFile("/etc/aks-flex-node/config.json", cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		// The applied state records the config, so the first start with
		// the new source writes that; the one after it is the converged
		// re-run.
		e.start(t, h, sc, src.kind+"-first")
		d, n := e.checkConverged(t, h, sc)
		t.Logf("BENCH converged-rerun source=%s duration=%v bytes-hashed=%d", src.kind, d.Round(time.Millisecond), n)
	}
	if err := h.WriteFile("/etc/aks-flex-node/config.json", e.config(sc, sc.auth, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkPowerCutRecovery: after a power cut nothing but the agent, which
// systemd starts at boot, brings the node's machine back; a new pod proves
// the kubelet is up (the Node's Ready condition alone could still be the
// stale one).
func (e *env) checkPowerCutRecovery(t *testing.T, h *aclhost.Host, sc scenario) {
	dropStaticRoute(t, h, sc)
	cut := time.Now()
	if err := h.PowerCycle(e.ctx); err != nil {
		t.Fatal(err)
	}
	logs := kubetest.RunPod(e.ctx, t, e.cp.Client, sc.nodeName, "after-power-cut-"+sc.name, fixtures.BusyboxImageRef, helloCommand, 2*time.Minute)
	if strings.TrimSpace(logs) != "hello from aks-flex-node" {
		t.Errorf("pod logs after the power cut %q", logs)
	}
	if j := h.RunOK(t, "journalctl", "--no-pager", "-u", "aks-flex-node-agent.service", "-b"); !strings.Contains(j, "starting it") {
		t.Errorf("the agent did not say it started the machine after the power cut:\n%s", j)
	}
	t.Logf("BENCH scenario=%s power-cut-to-pod-running=%v", sc.name, time.Since(cut).Round(time.Millisecond))
	e.checkStaticRouteBack(t, h, sc)
}

// refusals: each bad input stops start before it touches the host, and
// the message names the cause.
func (e *env) refusals(t *testing.T, h *aclhost.Host, sc scenario) {
	otherCA, err := os.ReadFile(filepath.Join(repoRoot(), "internal/config/testdata/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, auth string
		edit       func(p *cfgParts)
		want       string
	}{
		{"wrong CA", "bootstrap-token", func(p *cfgParts) { p.kubelet["caCertData"] = base64.StdEncoding.EncodeToString(otherCA) }, "[ERROR api-server-reachable]"},
		{"wrong token", "bootstrap-token", func(p *cfgParts) { p.azure["bootstrapToken"] = map[string]any{"token": "zzzzzz.0123456789abcdef"} }, "rejected the bootstrap token zzzzzz"},
		{"unreachable API server", "bootstrap-token", func(p *cfgParts) { p.kubelet["clusterFQDN"] = e.net.Outer + ":1" }, "[ERROR api-server-reachable]"},
		{"prefix on a read-only mount", "bootstrap-token", func(p *cfgParts) { p.agent["hostPrefix"] = "/usr/aks-flex-node" }, "[ERROR host-layout]"},
		// One byte changed in the kubelet layer at the registry: refused
		// by preflight, naming the file, before anything is downloaded.
		{"tampered bundle", "bootstrap-token", func(p *cfgParts) { p.bootstrap["offlineArtifacts"] = map[string]any{"source": e.tampered} }, artifactPath(e.manifest, "kubelet") + ": layer sha256:"},
		// The same in a local bundle: preflight verifies it in full.
		{"tampered local bundle", "bootstrap-token", func(p *cfgParts) {
			p.bootstrap["offlineArtifacts"] = map[string]any{"source": "/var/lib/aks-flex-node-test/tampered-bundle"}
		}, "/var/lib/aks-flex-node-test/tampered-bundle/" + artifactPath(e.manifest, "kubelet") + ": sha256 "},
		// A managed identity where no IMDS answers (not yet served).
		{"unreachable IMDS", "msi", nil, "[ERROR identity]: system-assigned managed identity at http://169.254.169.254/metadata/identity/oauth2/token"},
		// Nothing learns the API server from Azure: the config says so.
		{"Azure identity without clusterFQDN", "msi", func(p *cfgParts) { delete(p.kubelet, "clusterFQDN") }, "node.kubelet.clusterFQDN: is required with azure.managedIdentity"},
	}
	for i, tc := range cases {
		path := fmt.Sprintf("/root/bad-%d.json", i)
		if err := h.WriteFile(path, e.config(sc, tc.auth, tc.edit), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before, err := h.Snapshot("/etc", "/var", "/opt", "/usr", "/run")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		e.refuse(t, h, tc.name, fmt.Sprintf("/root/bad-%d.json", i), tc.want)
	}
	// IMDS answers now, for an identity the cluster has no RBAC for yet:
	// cluster-access names what the kubelet would be refused.
	e.entra.ServeIMDS(t, e.net)
	e.refuse(t, h, "identity without RBAC", "/etc/aks-flex-node/config.json", "[ERROR cluster-access]")
	if stdout, _, _ := h.Run(e.ctx, "/root/dist/aks-flex-node", "preflight"); !strings.Contains(stdout, "may not create certificatesigningrequests") || !strings.Contains(stdout, "cluster prepare --identity "+e.entra.MSI.ObjectID) {
		t.Errorf("preflight without RBAC does not name the missing permission and the remedy:\n%s", stdout)
	}
	// `artifacts verify` on the host says the same about the tampered
	// bundle, on one line, with exit 1; the good one verifies.
	stdout, stderr, err := h.Run(e.ctx, "/root/dist/aks-flex-node", "artifacts", "verify", "--source", e.tampered, "--kubernetes-version", e.manifest.Components.Kubernetes)
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); exitCode(err) != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], artifactPath(e.manifest, "kubelet")+": layer sha256:") {
		t.Errorf("artifacts verify of the tampered bundle: exit %d, want 1 and one line naming the kubelet:\n%s\n%s", exitCode(err), stdout, stderr)
	}
	good := strings.TrimSuffix(e.tampered, "-tampered")
	if stdout, stderr, err := h.Run(e.ctx, "/root/dist/aks-flex-node", "artifacts", "verify", "--source", good, "--kubernetes-version", e.manifest.Components.Kubernetes); err != nil {
		t.Errorf("artifacts verify %s: %v\n%s\n%s", good, err, stdout, stderr)
	}
	after, err := h.Snapshot("/etc", "/var", "/opt", "/usr", "/run")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("a refused start changed the host:\n%s", strings.Join(d, "\n"))
	}
}

// spRefusals: a service principal that cannot sign in, for each reason,
// stops start before it touches the host, naming the identity platform's
// answer or the file.
func (e *env) spRefusals(t *testing.T, h *aclhost.Host, sc scenario) {
	cases := []struct {
		name, auth string
		edit       func(p *cfgParts)
		want       string
	}{
		{"wrong secret", "sp-secret", func(p *cfgParts) {
			p.azure["servicePrincipal"].(map[string]any)["clientSecret"] = "not-the-secret-value"
		}, "AADSTS7000215: Invalid client secret provided"},
		{"unknown client", "sp-secret", func(p *cfgParts) {
			p.azure["servicePrincipal"].(map[string]any)["clientId"] = "00000000-0000-0000-0000-00000000dead"
		}, "AADSTS700016: Application with identifier '00000000-0000-0000-0000-00000000dead' was not found"},
		{"certificate file mode 0644", "sp-cert", func(p *cfgParts) {
			p.azure["servicePrincipal"].(map[string]any)["clientCertificatePath"] = "/root/sp-0644.pem"
		}, "/root/sp-0644.pem has mode 0644"},
	}
	if err := h.WriteFile("/root/sp-0644.pem", e.entra.SPCertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if err := h.WriteFile(fmt.Sprintf("/root/bad-sp-%d.json", i), e.config(sc, tc.auth, tc.edit), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before, err := h.Snapshot("/etc", "/var", "/opt", "/usr", "/run")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		e.refuse(t, h, tc.name, fmt.Sprintf("/root/bad-sp-%d.json", i), tc.want)
	}
	after, err := h.Snapshot("/etc", "/var", "/opt", "/usr", "/run")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("a refused start changed the host:\n%s", strings.Join(d, "\n"))
	}
}

// demo prints what `make demo` promises, and with KEEP=1 keeps it all
// running until interrupted.
func (e *env) demo(t *testing.T, h *aclhost.Host, sc scenario, logs string) {
	out, err := exec.Command(e.binDir+"/kubectl", "--kubeconfig", e.cp.AdminKubeconfig, "get", "nodes", "-o", "wide").CombinedOutput()
	step("The node in the cluster, and a pod on it")
	fmt.Printf("$ kubectl get nodes -o wide\n%s\n$ kubectl logs hello\n%s\n", out, logs)
	step("Day 2: aks-flex-node debug")
	e.demoShow(h, sc.agent, "debug")
	step("The rest of the scenario runs silently: converged re-run, power cut, a warm join, reset, uninstall, join again")
	if err != nil {
		t.Errorf("kubectl: %v", err)
	}
	if os.Getenv("KEEP") == "1" {
		fmt.Printf("KEEP=1: running until Ctrl-C.\n  kubectl: KUBECONFIG=%s %s/kubectl get pods -A\n  the host: nsenter -t %d -a /bin/bash\n", e.cp.AdminKubeconfig, e.binDir, h.Leader())
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
	}
}

func sha256File(t *testing.T, p string) string {
	sum, _, err := fsutil.FileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// idleCPU measures the agent's CPU time (its own and its waited-for
// children's, from /proc/<pid>/stat) over AKS_FLEX_NODE_IDLE_SECONDS on
// the joined node; unset, it measures nothing. It is a figure, not a
// check.
func idleCPU(t *testing.T, h *aclhost.Host, pid string) {
	secs, _ := strconv.Atoi(os.Getenv("AKS_FLEX_NODE_IDLE_SECONDS"))
	if secs <= 0 {
		return
	}
	ticks := func() int64 {
		out := h.RunOK(t, "cat", "/proc/"+pid+"/stat")
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(out[strings.LastIndexByte(out, ')')+1:])
		var n int64
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
		return n
	}
	hz, _ := strconv.ParseInt(strings.TrimSpace(h.RunOK(t, "getconf", "CLK_TCK")), 10, 64)
	before, began := ticks(), time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	used := time.Duration(ticks()-before) * time.Second / time.Duration(hz)
	wall := time.Since(began)
	t.Logf("BENCH agent-idle-cpu pid=%s cpu=%v over=%v (%.3f%% of one core)", pid, used, wall.Round(time.Second), 100*used.Seconds()/wall.Seconds())
}

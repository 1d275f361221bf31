// Package ignition is zero-touch provisioning end to end: a config rendered
// by `aks-flex-node ignition render` is applied to a fresh ACL-like host root
// by the real Ignition (Debian's ignition package), the host boots, and the
// first-boot unit alone joins it to a local control plane. Nothing is run
// inside the host before it has joined; the test only looks.
package ignition

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/ignitiontest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fakeimds"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

const (
	prefix    = "/opt/aks-flex-node"
	agentPath = prefix + "/bin/aks-flex-node"
	// currentLink is what the agent unit runs once start has seeded the
	// blue/green slots from the binary Ignition placed at agentPath.
	currentLink = prefix + "/lib/current"
	nodeName    = "ign-node-1"
	unitName    = "aks-flex-node-firstboot.service"
	marker      = "/var/lib/aks-flex-node/joined"
	configPath  = "/etc/aks-flex-node/config.json"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// buildAgent builds the agent as a release would be (stripped), since its
// size is what an embedded --binary adds to the Ignition config.
func buildAgent(t *testing.T, out string) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "-ldflags",
		"-s -w -X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
}

// firstBoot is one run of the scenario: the cluster it joins, the agent
// and configs it renders, and the host once it booted.
type firstBoot struct {
	ctx       context.Context
	cp        *controlplane.ControlPlane
	link      *netlab.Link
	layoutDir string
	bundle    string
	manifest  fixtures.Manifest
	dist      string // the agent, its config and the rendered Ignition configs
	agent     string
	ign       string // the full config, with the agent embedded
	imdsURL   string
	imdsHits  *atomic.Int32
	h         *aclhost.Host

	renderTime, ignitionTime, bootToJoined, readyAfter time.Duration
}

func TestIgnitionFirstBootJoin(t *testing.T) {
	ignitiontest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	f := &firstBoot{ctx: ctx}
	f.startCluster(t)
	f.renderIgnition(t)

	// The host boots from a root only Ignition has touched; from here on
	// the test only looks until the first boot has joined.
	f.bootProvisioned(t)
	f.checkFirstBootJoined(t)
	t.Logf("BENCH ignition-files-stage=%v boot-to-running(joined)=%v boot-to-node-ready=%v", f.ignitionTime.Round(time.Millisecond), f.bootToJoined.Round(time.Millisecond), f.readyAfter.Round(time.Millisecond))

	f.checkSecondBootSkips(t)
	f.checkResetJoinsAgainOnNextBoot(t)
	f.checkUninstallRemovesFirstBootUnit(t)
}

// startCluster gets the fixtures and starts a control plane on a private
// link for the host to join.
func (f *firstBoot) startCluster(t *testing.T) {
	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	if f.layoutDir, _, err = fixtures.WorkerImage(f.ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
	f.bundle, f.manifest, err = fixtures.Bundle(f.ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubernetesVersion: "1.35.4"})
	if err != nil {
		t.Fatal(err)
	}
	f.link = netlab.New(t)
	cp, err := controlplane.Start(f.ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: f.link.Outer, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr)
		}
		_ = cp.Stop()
	})
	// The control plane grants the token nothing; an admin applies what
	// `aks-flex-node cluster prepare --bootstrap-token` prints.
	objs, err := clusterprep.Render("ignition e2e", clusterprep.BootstrapTokenObjects(clusterprep.BootstrapToken{ID: cp.TokenID, Secret: cp.TokenSecret}, time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(f.ctx, objs, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	f.cp = cp
}

// agentConfig is the node's config.json: join f.cp with its bootstrap
// token, the agent under prefix, machine image and bundle from the paths
// bootProvisioned binds into the host.
func (f *firstBoot) agentConfig() []byte {
	m := f.manifest.Components
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      map[string]any{"bootstrapToken": map[string]any{"token": f.cp.Token}},
		"agent":      map[string]any{"nodeName": nodeName, "hostPrefix": prefix},
		"components": map[string]any{"kubernetes": m.Kubernetes, "containerd": m.Containerd, "runc": m.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": m.CNI},
		"bootstrap": map[string]any{"ociImage": "oci-layout:///var/lib/aks-flex-node-test/worker:" + fixtures.WorkerTag,
			"offlineArtifacts": map[string]any{"source": "/var/lib/aks-flex-node-test/bundle"}},
		"node": map[string]any{"kubelet": map[string]any{
			"clusterFQDN": strings.TrimPrefix(f.cp.Server, "https://"),
			"caCertData":  base64.StdEncoding.EncodeToString(f.cp.CAPEM),
			"nodeIP":      f.link.Inner,
		}},
	}, "", "  ")
	return cfg
}

// renderIgnition builds the agent and renders two Ignition configs with
// it: the full one, the agent embedded (--binary), that provisions the
// host; and a small one with the binary by URL, as Azure's 64 KiB userData
// would carry it, that the fake IMDS serves so that start's preflight
// judges a real Ignition payload on this ACL host.
func (f *firstBoot) renderIgnition(t *testing.T) {
	f.dist = t.TempDir()
	f.agent = filepath.Join(f.dist, "aks-flex-node")
	buildAgent(t, f.agent)
	cfgFile := filepath.Join(f.dist, "config.json")
	if err := os.WriteFile(cfgFile, f.agentConfig(), 0o600); err != nil {
		t.Fatal(err)
	}

	f.ign = filepath.Join(f.dist, "config.ign")
	start := time.Now()
	out, err := exec.Command(f.agent, "ignition", "render", "--config", cfgFile, "--binary", f.agent, "--output", f.ign).CombinedOutput()
	if err != nil {
		t.Fatalf("ignition render: %v\n%s", err, out)
	}
	f.renderTime = time.Since(start)
	if bytes.Contains(out, []byte(f.cp.Token)) {
		t.Fatalf("ignition render printed the bootstrap token")
	}
	if !bytes.Contains(out, []byte("readable by anyone with access to the VM's metadata")) {
		t.Errorf("ignition render did not warn about customData: %s", out)
	}
	binSt, _ := os.Stat(f.agent)
	ignSt, err := os.Stat(f.ign)
	if err != nil || ignSt.Mode().Perm() != 0o600 {
		t.Fatalf("rendered config: %v, mode %v", err, ignSt.Mode())
	}
	if out, err := exec.Command(f.agent, "ignition", "check", f.ign).CombinedOutput(); err != nil {
		t.Fatalf("ignition check: %v\n%s", err, out)
	}
	small, err := exec.Command(f.agent, "ignition", "render", "--config", cfgFile, "--binary-url", "https://example.invalid/aks-flex-node",
		"--binary-sha256", strings.Repeat("0", 64), "--output", "-").Output()
	if err != nil {
		t.Fatalf("ignition render --binary-url: %v", err)
	}
	f.imdsURL, f.imdsHits = fakeIMDS(t, f.link.Outer, small)
	t.Logf("BENCH render=%v binary=%d bytes ignition-config=%d bytes (spec 3.3.0, gzip data URL) url-config=%d bytes",
		f.renderTime.Round(time.Millisecond), binSt.Size(), ignSt.Size(), len(small))
}

// provision does to a fresh root what the platform and the initramfs do
// before its first boot, then checks what Ignition wrote.
func (f *firstBoot) provision(t *testing.T, root string) error {
	if err := ignitiontest.FreshRoot(root); err != nil {
		return err
	}
	// The platform, as the test provides it: IMDS at the fake. On Azure it
	// is 169.254.169.254, which a test must never ask.
	dropIn := filepath.Join(root, "etc/systemd/system", unitName+".d")
	if err := os.MkdirAll(dropIn, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dropIn, "10-test-imds.conf"), []byte("[Service]\nEnvironment=AKS_FLEX_NODE_IMDS_ENDPOINT="+f.imdsURL+"\n"), 0o644); err != nil {
		return err
	}
	start := time.Now()
	if err := ignitiontest.Run(t, f.dist, f.ign, root); err != nil {
		return err
	}
	f.ignitionTime = time.Since(start)
	return checkProvisioned(root)
}

// bootProvisioned boots the ACL-like host from the root provision made; it
// returns once the boot, the first-boot join included, is over.
func (f *firstBoot) bootProvisioned(t *testing.T) {
	bootStart := time.Now()
	f.h = aclhost.MustStart(t, aclhost.Options{Variant: aclhost.ACL, Name: "ign", NetNS: f.link.NS,
		// The first-boot unit is part of the boot: multi-user.target waits
		// for it, so "running" means the join is done (or failed).
		BootTimeout: 8 * time.Minute,
		Prepare:     func(root string) error { return f.provision(t, root) },
		ExtraArgs: []string{
			"--bind=" + t.TempDir() + ":/var/lib/machines",
			"--bind-ro=" + f.layoutDir + ":/var/lib/aks-flex-node-test/worker",
			"--bind-ro=" + f.bundle + ":/var/lib/aks-flex-node-test/bundle",
		}})
	f.bootToJoined = time.Since(bootStart)
	kubetest.WaitReady(f.ctx, t, f.cp.Client, nodeName, 2*time.Minute)
	f.readyAfter = time.Since(bootStart)
}

// firstBootUnit returns the properties props of the first-boot unit.
func (f *firstBoot) firstBootUnit(t *testing.T, props ...string) map[string]string {
	args := []string{"systemctl", "show", unitName}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	m := map[string]string{}
	for _, l := range strings.Split(f.h.RunOK(t, args...), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// checkFirstBootJoined: the node runs a pod; the first-boot unit, enabled
// by Ignition's preset, ran start (preflight judged the payload the fake
// IMDS served) without logging the token; the agent runs from the slots
// start seeded; nothing was written under /usr, Ignition included.
func (f *firstBoot) checkFirstBootJoined(t *testing.T) {
	h := f.h
	logs := kubetest.RunPod(f.ctx, t, f.cp.Client, nodeName, "hello-ignition", fixtures.BusyboxImageRef, []string{"sh", "-c", "echo hello from an Ignition-provisioned node"}, 2*time.Minute)
	if strings.TrimSpace(logs) != "hello from an Ignition-provisioned node" {
		t.Errorf("pod logs %q", logs)
	}
	first := f.firstBootUnit(t, "Result", "ExecMainStatus", "ConditionResult", "UnitFileState", "ExecMainStartTimestampMonotonic")
	if first["Result"] != "success" || first["ExecMainStatus"] != "0" || first["ConditionResult"] != "yes" || first["UnitFileState"] != "enabled" {
		t.Errorf("first boot: %s: %v", unitName, first)
	}
	f.checkFirstBootJournal(t)
	// Enabled by systemd's first-boot preset handling of Ignition's preset.
	if preset := h.RunOK(t, "cat", "/etc/systemd/system-preset/20-ignition.preset"); !strings.Contains(preset, "enable "+unitName) {
		t.Errorf("Ignition preset: %q", preset)
	}
	h.RunOK(t, "test", "-L", "/etc/systemd/system/multi-user.target.wants/"+unitName)
	h.RunOK(t, "test", "-f", marker)
	if st := strings.TrimSpace(h.RunOK(t, "systemctl", "is-active", "aks-flex-node-agent.service")); st != "active" {
		t.Errorf("agent service %s", st)
	}
	if exe := h.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", "aks-flex-node-agent.service"); !strings.Contains(exe, "path="+currentLink+" ") {
		t.Errorf("agent ExecStart: %s, want %s", exe, currentLink)
	}
	// start seeded the slots from Ignition's regular file: the CLI path now
	// resolves to the running slot.
	if dst := strings.TrimSpace(h.RunOK(t, "readlink", agentPath)); dst != currentLink {
		t.Errorf("%s -> %q after start, want a link to %s", agentPath, dst, currentLink)
	}
	// Nothing under /usr: the overlay's upper dir records every write to
	// the host's root since it was mounted, Ignition's included.
	changes, err := h.ChangesUnder("/usr")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		t.Errorf("written under /usr: %s", c)
	}
}

// checkFirstBootJournal: the first-boot unit ran start's preflight, which
// asked the fake IMDS, and joined; the token is nowhere in its journal.
func (f *firstBoot) checkFirstBootJournal(t *testing.T) {
	journal := f.h.RunOK(t, "journalctl", "-b", "-u", unitName, "--no-pager", "-o", "cat")
	for _, want := range []string{
		"[preflight]", "provisioning-payload",
		"node " + nodeName + " joined",
	} {
		if !strings.Contains(journal, want) {
			t.Errorf("first-boot journal lacks %q:\n%s", want, journal)
		}
	}
	for _, l := range strings.Split(journal, "\n") {
		if strings.Contains(l, "provisioning-payload") {
			t.Logf("first boot, start's preflight: %s", strings.TrimSpace(l))
		}
	}
	if bytes.Contains([]byte(journal), []byte(f.cp.Token)) {
		t.Errorf("the bootstrap token is in the journal")
	}
	if f.imdsHits.Load() == 0 {
		t.Errorf("start's preflight did not ask the (fake) IMDS for userData")
	}
}

// checkSecondBootSkips: on the next boot the marker is there, so the
// first-boot unit's condition fails and start does not run.
func (f *firstBoot) checkSecondBootSkips(t *testing.T) {
	h := f.h
	if err := h.PowerCycle(f.ctx); err != nil {
		t.Fatal(err)
	}
	second := f.firstBootUnit(t, "Result", "ConditionResult", "ExecMainStartTimestampMonotonic", "ActiveState")
	if second["ConditionResult"] != "no" || second["ExecMainStartTimestampMonotonic"] != "0" {
		t.Errorf("second boot: %s ran again or was not evaluated: %v", unitName, second)
	}
	if j := h.RunOK(t, "journalctl", "-b", "-u", unitName, "--no-pager", "-o", "cat"); strings.Contains(j, "[preflight]") {
		t.Errorf("second boot: the first-boot unit ran start:\n%s", j)
	}
	t.Logf("second boot: %s %v; agent service %s", unitName, second, strings.TrimSpace(h.RunOK(t, "systemctl", "is-active", "aks-flex-node-agent.service")))
}

// checkResetJoinsAgainOnNextBoot: reset removes the marker, so the next
// boot runs the first-boot unit again and the node comes back Ready.
func (f *firstBoot) checkResetJoinsAgainOnNextBoot(t *testing.T) {
	h := f.h
	h.RunOK(t, agentPath, "reset")
	if _, _, err := h.Run(f.ctx, "test", "-e", marker); err == nil {
		t.Fatalf("reset left %s", marker)
	}
	if err := h.PowerCycle(f.ctx); err != nil {
		t.Fatal(err)
	}
	third := f.firstBootUnit(t, "Result", "ConditionResult", "ExecMainStatus")
	if third["ConditionResult"] != "yes" || third["Result"] != "success" || third["ExecMainStatus"] != "0" {
		t.Errorf("boot after reset: %s: %v", unitName, third)
	}
	kubetest.WaitReady(f.ctx, t, f.cp.Client, nodeName, 2*time.Minute)
	h.RunOK(t, "test", "-f", marker)
}

// checkUninstallRemovesFirstBootUnit: uninstall.sh removes the first-boot
// unit too. Left behind, its condition (no marker) would hold again after
// the reset uninstall runs, and it would try to join on every boot with no
// binary.
func (f *firstBoot) checkUninstallRemovesFirstBootUnit(t *testing.T) {
	h := f.h
	if err := h.CopyIn(filepath.Join(repoRoot(), "scripts", "uninstall.sh"), "/root/uninstall.sh", 0o755); err != nil {
		t.Fatal(err)
	}
	h.RunOK(t, "/root/uninstall.sh")
	for _, p := range []string{"/etc/systemd/system/" + unitName, "/etc/systemd/system/multi-user.target.wants/" + unitName, agentPath, marker} {
		if _, _, err := h.Run(f.ctx, "test", "-e", p); err == nil {
			t.Errorf("uninstall.sh left %s", p)
		}
	}
	if err := h.PowerCycle(f.ctx); err != nil {
		t.Fatal(err)
	}
	if out, _, err := h.Run(f.ctx, "systemctl", "show", unitName, "-p", "LoadState", "-p", "ExecMainStartTimestampMonotonic"); err != nil || !strings.Contains(out, "LoadState=not-found") || !strings.Contains(out, "ExecMainStartTimestampMonotonic=0") {
		t.Errorf("after uninstall and a reboot, %s: %v\n%s", unitName, err, out)
	}
}

// checkProvisioned: what Ignition wrote, with the modes the config asks for.
func checkProvisioned(root string) error {
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{configPath, 0o600},
		{agentPath, 0o755},
		{"/etc/systemd/system/" + unitName, 0o644},
	} {
		st, err := os.Stat(filepath.Join(root, f.path))
		if err != nil {
			return fmt.Errorf("after Ignition: %w", err)
		}
		if st.Mode().Perm() != f.mode {
			return fmt.Errorf("after Ignition: %s has mode %v, want %v", f.path, st.Mode().Perm(), f.mode)
		}
	}
	return nil
}

// fakeIMDS serves userData on addr and returns the base URL and a hit
// counter.
func fakeIMDS(t *testing.T, addr string, userData []byte) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return fakeimds.Serve(t, l, userData)
}

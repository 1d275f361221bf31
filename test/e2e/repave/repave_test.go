// Package repave is the node's blue/green repave end to end: an ACL-like
// host joined to a real control plane runs a Deployment of 2 replicas
// with a PodDisruptionBudget (minAvailable 1); `node upgrade` refuses to
// break the budget (its drain times out naming the pod, the node is
// uncordoned, kube1 still serves), then `start` with the config's
// components.kubernetes changed repaves onto kube2 (pods evicted, the
// Node's name and UID unchanged, kube1 stopped), `node upgrade` with
// another worker image back onto kube1, then `start` with the agent's
// rollout record naming that image (the file still names the first one)
// converges without repaving back, saying where each value came from,
// and a repave to a bundle whose
// kubelet exits at start rolls back: the old side Ready and uncordoned,
// the reason in `status`.
//
// The node joins at 1.34.2 (a kubelet built from the module proxy by
// build-k8s.sh --module cmd-1.34, cached like the control plane's), the
// first repave takes it to the control plane's 1.35.4, the second stays at
// 1.35.4 with another worker image (another digest), and the rollback's
// bundle says 1.35.5.
package repave

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

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

const (
	nodeName = "repave-node-1"
	prefix   = "/opt/aks-flex-node"
	agent    = prefix + "/bin/aks-flex-node"
	// Where the host sees the fixtures.
	workerRef  = "oci-layout:///var/lib/aks-flex-node-test/worker:" + fixtures.WorkerTag
	worker2Ref = "oci-layout:///var/lib/aks-flex-node-test/worker2:" + fixtures.WorkerTag
	bundleDir  = "/var/lib/aks-flex-node-test/bundle-"
	// joined is the node's first version, version the control plane's.
	joined  = "1.34.2"
	version = "1.35.4"
	// failing is the version of the bundle whose kubelet exits at start.
	failing = "1.35.5"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

type env struct {
	ctx context.Context
	cp  *controlplane.ControlPlane
	net *netlab.Link
	h   *aclhost.Host
	// next is the manifest of the bundle at version: start-repaves's
	// config names it.
	next fixtures.Manifest
}

func TestRepave(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	e := &env{ctx: ctx}
	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl")
	must(t, err)
	layoutDir, _, err := fixtures.WorkerImage(ctx, t.Logf)
	must(t, err)
	worker2 := otherWorkerImage(t, layoutDir)
	bundle, next, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: binDir + "/kubelet", KubectlPath: binDir + "/kubectl", KubernetesVersion: version})
	must(t, err)
	e.next = next
	bad, _, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: failingKubelet(t), KubectlPath: binDir + "/kubectl", KubernetesVersion: failing})
	must(t, err)
	first, firstManifest, err := fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: previousKubelet(t), KubectlPath: binDir + "/kubectl", KubernetesVersion: joined})
	must(t, err)
	e.net = netlab.New(t)
	e.cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: e.net.Outer, Logf: t.Logf})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			e.cp.DumpLogs(os.Stderr)
		}
		_ = e.cp.Stop()
	})
	objs, err := clusterprep.Render("repave e2e", clusterprep.BootstrapTokenObjects(clusterprep.BootstrapToken{ID: e.cp.TokenID, Secret: e.cp.TokenSecret}, time.Now().Add(time.Hour)))
	must(t, err)
	_, err = e.cp.Kubectl(ctx, objs, "apply", "-f", "-")
	must(t, err)
	dist := t.TempDir()
	buildAgent(t, dist+"/aks-flex-node")
	buildAgent(t, dist+"/aks-flex-node-fp", "failpoints")
	e.h = aclhost.MustStart(t, aclhost.Options{Variant: aclhost.ACL, Name: "repave", NetNS: e.net.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + layoutDir + ":/var/lib/aks-flex-node-test/worker",
		"--bind-ro=" + worker2 + ":/var/lib/aks-flex-node-test/worker2",
		"--bind-ro=" + first + ":" + bundleDir + joined,
		"--bind-ro=" + bundle + ":" + bundleDir + version,
		"--bind-ro=" + bad + ":" + bundleDir + failing,
	}})
	t.Cleanup(func() {
		if t.Failed() {
			j, _, _ := e.h.Run(context.Background(), "journalctl", "--no-pager", "-n", "120", "-u", "aks-flex-node-agent")
			t.Logf("agent journal:\n%s", j)
			s, _, _ := e.h.Run(context.Background(), agent, "status")
			t.Logf("status:\n%s", s)
		}
	})
	must(t, e.h.CopyIn(dist+"/aks-flex-node", "/root/dist/aks-flex-node", 0o755))
	must(t, e.h.CopyIn(dist+"/aks-flex-node-fp", fpAgent, 0o755))
	must(t, e.h.CopyIn(filepath.Join(repoRoot(), "scripts", "install.sh"), "/root/dist/install.sh", 0o755))
	must(t, e.h.WriteFile("/etc/aks-flex-node/config.json", e.config(firstManifest), 0o600))
	sum, _, err := fsutil.FileSHA256(dist + "/aks-flex-node")
	must(t, err)
	e.h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sum)
	if out, stderr, err := e.h.Run(ctx, agent, "start", "--join-timeout", "2m"); err != nil {
		t.Fatalf("start: %v\n%s\n%s", err, out, stderr)
	}
	kubetest.WaitReady(ctx, t, e.cp.Client, nodeName, 2*time.Minute)
	if v := e.node(t).Status.NodeInfo.KubeletVersion; v != "v"+joined {
		t.Fatalf("joined with kubelet %s, want v%s", v, joined)
	}

	w := e.deploy(t)
	t.Run("pdb-blocks-the-drain", func(t *testing.T) { e.blockedDrain(t, w) })
	w.relaxBudget(t)
	t.Run("start-repaves-kube1-to-kube2", func(t *testing.T) { e.startRepave(t, w) })
	t.Run("kube2-to-kube1", func(t *testing.T) { e.upgrade(t, w, "kube2", "kube1", worker2Ref) })
	t.Run("start-keeps-the-rollouts-release", e.startKeepsTheRolloutsRelease)
	t.Run("rollback", e.rollback)
	// The matrix runs 33 repaves: without pods to evict each is shorter,
	// and what it checks is which machine runs, not the pods.
	w.remove(t)
	t.Run("crash-matrix-rollback", e.rollbackCrashMatrix)
	t.Run("crash-matrix", e.crashMatrix)
	t.Run("switch-back", e.switchBack)       // issue 30 item 4 (switchback_test.go)
	t.Run("fleet-rollback", e.fleetRollback) // issue 30 item 4, through a rollout
	// Issue 30 item 5 (agent_release_test.go); needs no earlier subtest:
	// -run '^TestRepave$/^fleet-agent-release$' runs it after the join.
	t.Run("fleet-agent-release", e.fleetAgentRelease)
}

func (e *env) config(m fixtures.Manifest) []byte {
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      map[string]any{"bootstrapToken": map[string]any{"token": e.cp.Token}},
		"agent":      map[string]any{"nodeName": nodeName, "hostPrefix": prefix, "machineReconcileInterval": "5s"},
		"components": map[string]any{"kubernetes": m.Components.Kubernetes, "containerd": m.Components.Containerd, "runc": m.Components.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": m.Components.CNI},
		"bootstrap": map[string]any{"ociImage": workerRef,
			"offlineArtifacts": map[string]any{"source": bundleDir + "{{ .KubernetesVersion }}"}},
		"node": map[string]any{"kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(e.cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(e.cp.CAPEM), "nodeIP": e.net.Inner}},
	}, "", "  ")
	return cfg
}

// failingKubelet is a kubelet that exits at start: the bundle's checks
// pass (its manifest records this file), the node never turns Ready.
func failingKubelet(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubelet")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\necho 'kubelet: failing at start on purpose (repave rollback e2e)' >&2\nexit 1\n"), 0o755))
	return p
}

// previousKubelet is the 1.34 kubelet `build-k8s.sh --module cmd-1.34`
// made (cached; `make test` and `make bench-repave` build it first).
func previousKubelet(t *testing.T) string {
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "test", "e2e", "build-k8s.sh"), "--module", "cmd-1.34", "--print-dir").Output()
	must(t, err)
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "kubelet")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("no %s: build it with test/e2e/build-k8s.sh --module cmd-1.34 (about 15 minutes cold on 2 busy cores)", p)
	}
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildAgent builds the agent to out, with the build tags given.
func buildAgent(t *testing.T, out string, tags ...string) {
	buildAgentVersion(t, out, "v1.0.0-e2e", tags...)
}

func buildAgentVersion(t *testing.T, out, version string, tags ...string) {
	cmd := exec.Command("go", "build", "-trimpath", "-tags", strings.Join(tags, ","), "-o", out, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version="+version, "./cmd/aks-flex-node")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
}

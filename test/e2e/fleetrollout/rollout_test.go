// Package fleetrollout is a FlexNodeRollout end to end: four flex nodes
// (three ACL-like hosts and a Debian host, each in its own network
// namespace on one bridge: netlab.NewBridge) join one control plane at
// release A (Kubernetes 1.34.2, worker image a, from a site registry on
// each host's loopback), with `cluster prepare --fleet` applied. A
// rollout to release B (Kubernetes 1.35.4, worker image b, both pinned
// by digest) with maxUnavailable 1 and a short soak moves every node to
// its other side while a watch on the Nodes never sees more than one of
// them unschedulable or NotReady, and `kubectl wait
// --for=condition=Complete` returns. A release whose bundle's kubelet
// exits on one host only pauses the rollout by itself: that host rolls
// back and keeps its slot, the rollout's status names it, the nodes that
// had not started stay where they were; after the host is fixed, `fleet
// resume` finishes the rollout. A release one host cannot stage (its
// worker image's digest does not match what it is served) stops every
// node from starting. The elected status writer killed mid-rollout is
// replaced by another agent. A node that loses power holding a slot
// keeps it for its lease's length, and the rollout completes once it is
// back. A node deleted holding a slot frees it at once.
//
// Nothing here fakes the product: the agents are the real daemon on real
// systemd, the slots and the status are what they write to a real
// kube-apiserver.
package fleetrollout

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
)

// env is what the hosts share.
type env struct {
	ctx      context.Context
	cp       *controlplane.ControlPlane
	lab      *netlab.Bridge
	reg      *siteRegistry
	rel      *releases
	dist     string // the agent binary as built for this test
	token    string // the bootstrap token `cluster prepare` wrote
	rollouts *fleet.Rollouts
	hosts    []*host
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestFleetRollout(t *testing.T) {
	aclhost.RequireE2E(t)
	// Beside TestFleetWaves: each has its own lab, control plane,
	// registry and host names.
	t.Parallel()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	e := setUp(ctx, t, specs, nil)
	e.joinAll(t)
	t.Logf("BENCH rollout-e2e setup-and-join=%v", time.Since(begin).Round(time.Millisecond))
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"maxUnavailable-1-to-B", e.happyPath},
		{"one-host-fails-C-pauses-then-resume", e.failOnOneHost},
		{"one-host-cannot-stage-D", e.stageFailsOnOneHost},
		{"power-cut-while-holding-a-slot", e.powerCut},
		{"node-deleted-then-status-writer-killed", e.nodeDeletedThenWriterKilled},
	} {
		// Each scenario starts from where the one before left the fleet.
		if !t.Run(sc.name, sc.run) {
			return
		}
	}
	t.Logf("BENCH rollout-e2e total=%v", time.Since(begin).Round(time.Millisecond))
}

// setUp builds the agent, makes the lab, starts the control plane on the
// lab's link with `cluster prepare --bootstrap-token --fleet` applied,
// publishes the releases and boots one host per spec (not joined yet).
func setUp(ctx context.Context, t *testing.T, specs []spec, auditPolicy []byte) *env {
	e := &env{ctx: ctx}
	binDir, err := controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl")
	must(t, err)
	e.dist = filepath.Join(t.TempDir(), "aks-flex-node")
	buildAgent(t, e.dist)
	e.lab = netlab.NewBridge(t, len(specs))
	e.cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: t.TempDir(), AdvertiseAddress: e.lab.Link.Outer, Logf: t.Logf, AuditPolicy: auditPolicy})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			e.cp.DumpLogs(os.Stderr)
		}
		_ = e.cp.Stop()
	})
	e.prepare(t)
	e.rollouts, err = fleet.NewRollouts(e.cp.AdminConfig, nil)
	must(t, err)
	var namespaces []string
	for _, h := range e.lab.Hosts {
		namespaces = append(namespaces, h.NS)
	}
	e.reg = startRegistry(t, namespaces)
	e.rel = publish(ctx, t, e.reg, e.dist)
	for i, s := range specs {
		e.hosts = append(e.hosts, e.boot(t, s, e.lab.Hosts[i]))
	}
	return e
}

// prepare applies what `cluster prepare --bootstrap-token --fleet`
// prints, as an admin would, and waits for the CRDs to be served.
func (e *env) prepare(t *testing.T) {
	dir := t.TempDir()
	tokenFile, objs := filepath.Join(dir, "token"), filepath.Join(dir, "prepare.yaml")
	run(t, e.dist, "cluster", "prepare", "--bootstrap-token", "--fleet", "--token-file", tokenFile, "--ttl", "2h", "--output", objs)
	tok, err := os.ReadFile(tokenFile)
	must(t, err)
	e.token = strings.TrimSpace(string(tok))
	_, err = e.cp.Kubectl(e.ctx, nil, "apply", "-f", objs)
	must(t, err)
	_, err = e.cp.Kubectl(e.ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+v1alpha1.Resource+"."+v1alpha1.Group)
	must(t, err)
}

// buildAgent builds the agent as the hosts install it.
func buildAgent(t *testing.T, out string) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
}

// run runs a command on this machine, as an admin would, and returns its
// output; it fails t if the command fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runCtx(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runCtx(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package fleetsim

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

const e2eEnv = "AKS_FLEX_NODE_E2E"

func requireE2E(t testing.TB) {
	t.Helper()
	if os.Getenv(e2eEnv) != "1" {
		t.Skipf("set %s=1 to run against a real control plane (binaries from test/e2e/build-k8s.sh)", e2eEnv)
	}
}

// startControlPlane is a control plane of the test's own, with what
// `cluster prepare --fleet` prints applied as an admin would.
func startControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	binDir, err := controlplane.FindBinDir("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
	if err != nil {
		t.Fatal(err) // with the gate set, missing binaries fail, never skip
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: filepath.Join(t.TempDir(), "cp"), PodCIDR: PodCIDR, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	objs, err := clusterprep.FleetObjects()
	if err != nil {
		t.Fatal(err)
	}
	data, err := clusterprep.Render("cluster prepare --fleet", objs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, data, "apply", "-f", "-"); err != nil {
		cp.DumpLogs(os.Stderr)
		t.Fatalf("apply cluster prepare --fleet: %v", err)
	}
	if _, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+v1alpha1.Resource+"."+v1alpha1.Group); err != nil {
		t.Fatal(err)
	}
	return cp
}

func init() {
	log.SetFlags(log.Lmicroseconds)
}

// TestMain runs the binary as a worker of the simulator when its parent
// started it so (worker.go), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// quantiles is p50, p99 and max of sorted-or-not durations, as text.
func quantiles(ds []time.Duration) string {
	w := window{latencies: ds}
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50=%s p99=%s max=%s", w.percentile(50).Round(time.Millisecond), w.percentile(99).Round(time.Millisecond), w.percentile(100).Round(time.Millisecond))
}

// Package rollout tests the fleet rollout's cluster side against a real
// kube-apiserver (test/e2e/controlplane): the objects `cluster prepare
// --fleet` prints applied with kubectl, the CRD's validation and defaults
// as the server enforces them, and the Lease slots under concurrency,
// expiry, restarts and deletion.
package rollout

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

const e2eEnv = "AKS_FLEX_NODE_E2E"

// cp is one control plane for the package: every test works in its own
// rollout name and its own Nodes, so they do not see each other.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(e2eEnv) != "1" {
		os.Exit(m.Run()) // each test skips
	}
	code, err := runWithControlPlane(m)
	if err != nil {
		log.Print(err)
		code = 1
	}
	os.Exit(code)
}

func runWithControlPlane(m *testing.M) (int, error) {
	binDir, err := controlplane.FindBinDir("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
	if err != nil {
		return 0, err // with the gate set, missing binaries fail, never skip
	}
	work, err := os.MkdirTemp("", "rollout-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: binDir, WorkDir: filepath.Join(work, "cp"), Logf: log.Printf})
	if err != nil {
		return 0, err
	}
	defer cp.Stop()
	if err := applyPrepareFleet(ctx); err != nil {
		cp.DumpLogs(os.Stderr)
		return 0, err
	}
	return m.Run(), nil
}

// applyPrepareFleet applies what `cluster prepare --fleet` prints, as an
// admin would, and waits for the CRD to be served.
func applyPrepareFleet(ctx context.Context) error {
	objs, err := clusterprep.FleetObjects()
	if err != nil {
		return err
	}
	data, err := clusterprep.Render("cluster prepare --fleet", objs)
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, data, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply cluster prepare --fleet: %w", err)
	}
	_, err = cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+v1alpha1.Resource+"."+v1alpha1.Group)
	return err
}

func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv(e2eEnv) != "1" {
		t.Skipf("set %s=1 to run against a real control plane (binaries from test/e2e/build-k8s.sh)", e2eEnv)
	}
}

// newNode registers a Node object (no kubelet: the slots only read its
// name and UID) and removes it after the test.
func newNode(t *testing.T, name string) types.UID {
	t.Helper()
	ctx := context.Background()
	n, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return n.UID
}

// newSlots is a holder's view of a rollout's slots, through the product's
// own slot client, as the node itself (asNode): only what `cluster
// prepare --fleet` and the Node authorizer grant.
func newSlots(t *testing.T, rollout, node string, uid types.UID, boot string, ttl time.Duration) *fleet.Slots {
	t.Helper()
	cfg := asNode(node)
	store, err := fleet.NewSlotStore(cfg, nil, v1alpha1.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fleet.Slots{Store: store, Nodes: nodes.CoreV1().Nodes(), Rollout: rollout,
		Holder: fleet.Holder{Node: node, UID: uid, BootID: boot}, TTL: ttl}
}

// heldBy lists the slots of rollout by holder identity, from the server.
func heldBy(t *testing.T, rollout string) map[string][]string {
	t.Helper()
	out, err := listHolders(rollout)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// releasedWithin waits up to d for every slot of rollout to be free and
// returns what is still held then: a node reports Updated first and only
// then releases its slot, so right after Updated it may still hold it.
func releasedWithin(t *testing.T, rollout string, d time.Duration) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		h := heldBy(t, rollout)
		if len(h) == 0 || time.Now().After(deadline) {
			return h
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func listHolders(rollout string) (map[string][]string, error) {
	store, err := fleet.NewSlotStore(cp.AdminConfig, nil, v1alpha1.Namespace)
	if err != nil {
		return nil, err
	}
	list, err := store.List(context.Background())
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, l := range list.Items {
		if len(l.Name) > len(rollout) && l.Name[:len(rollout)+1] == rollout+"-" && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			out[*l.Spec.HolderIdentity] = append(out[*l.Spec.HolderIdentity], l.Name)
		}
	}
	return out, nil
}

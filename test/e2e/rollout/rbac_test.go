package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// asNode is the admin's config impersonating node name as the kubelet and
// agent sign in (system:node:<name> in system:nodes), so the Node
// authorizer, NodeRestriction and the RBAC of `cluster prepare --fleet`
// decide as they do for a real node.
func asNode(name string) *rest.Config {
	c := rest.CopyConfig(cp.AdminConfig)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
	return c
}

// TestNodeCredentialDoesItsPart: with only what `cluster prepare --fleet`
// grants, a node's credential takes and releases a slot (reading other
// Nodes to judge their holders), writes its own FlexNodeRelease condition
// and the rollout's status, and is refused another Node's status, the
// rollout's spec and Leases outside aks-flex-node.
func TestNodeCredentialDoesItsPart(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	uid := newNode(t, "rbac-a")
	newNode(t, "rbac-b")
	cfg := asNode("rbac-a")
	nodeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := fleet.NewSlotStore(cfg, nil, v1alpha1.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	s := &fleet.Slots{Store: store, Nodes: nodeClient.CoreV1().Nodes(), Rollout: "rbac",
		Holder: fleet.Holder{Node: "rbac-a", UID: uid, BootID: "b"}, TTL: time.Minute}
	sl, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("acquire as the node: %v", err)
	}
	if err := s.Renew(ctx, sl); err != nil {
		t.Fatalf("renew as the node: %v", err)
	}
	// Another holder's slot: judging it reads that holder's Node.
	other := &fleet.Slots{Store: store, Nodes: nodeClient.CoreV1().Nodes(), Rollout: "rbac",
		Holder: fleet.Holder{Node: "rbac-b", UID: "x", BootID: "b"}, TTL: time.Minute}
	if _, err := other.Acquire(ctx, 1); !errors.Is(err, fleet.ErrNoSlot) {
		t.Fatalf("judging another node's slot as the node: %v", err)
	}
	// The slot policy: another node may neither hold a slot in a's name
	// nor release a's slot. The policy is enforced once the API server has
	// compiled it, a moment after prepare applied it: a bounded wait on
	// the first refusal (a fake slot that got through is removed).
	asB := []string{"--as=system:node:rbac-b", "--as-group=system:nodes", "--as-group=system:authenticated"}
	fake := []byte(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeSlot","metadata":{"name":"rbac-slot-7","namespace":"` + v1alpha1.Namespace +
		`"},"spec":{"holderIdentity":"rbac-a/` + string(uid) + `/b"}}`)
	var out []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, err = cp.Kubectl(ctx, fake, append(asB, "create", "-f", "-")...)
		if err != nil || time.Now().After(deadline) {
			break
		}
		if _, err := cp.Kubectl(ctx, nil, "delete", "-n", v1alpha1.Namespace, v1alpha1.SlotResource, "rbac-slot-7"); err != nil {
			t.Fatal(err)
		}
	}
	if err == nil || !strings.Contains(string(out), "only in its own name") {
		t.Errorf("rbac-b creating a slot in rbac-a's name: %v\n%s", err, out)
	}
	storeB, err := fleet.NewSlotStore(asNode("rbac-b"), nil, v1alpha1.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	cleared := sl.Lease.DeepCopy()
	cleared.Spec.HolderIdentity = nil
	if _, err := storeB.Update(ctx, cleared); err == nil || !strings.Contains(err.Error(), "may not release or change a slot another node holds") {
		t.Errorf("rbac-b clearing rbac-a's slot: %v", err)
	}
	if err := s.Release(ctx, sl); err != nil {
		t.Fatalf("release as the node: %v", err)
	}

	// Its own Node's condition, through nodes/status.
	c := fleet.NodeRelease{Rollout: "rbac", Generation: 1, Phase: fleet.PhaseStaged, Step: "stage", Since: time.Now()}.Condition(time.Now())
	patch, err := fleet.ConditionPatch(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeClient.CoreV1().Nodes().Patch(ctx, "rbac-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patch its own Node's status: %v", err)
	}
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, "rbac-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok, err := fleet.ReadNodeRelease(n); !ok || err != nil || r.Phase != fleet.PhaseStaged {
		t.Errorf("the condition read back: %+v %v %v", r, ok, err)
	}
	if _, err := nodeClient.CoreV1().Nodes().Patch(ctx, "rbac-b", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("patch another Node's status: %v, want Forbidden", err)
	}

	// The rollout: read, status written, spec refused.
	r := `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"rbac"},"spec":{"nodeSelector":{},"release":{"kubernetesVersion":"v1.35.4"}}}`
	if _, err := cp.Kubectl(ctx, []byte(r), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	as := []string{"--as=system:node:rbac-a", "--as-group=system:nodes", "--as-group=system:authenticated"}
	kubectl := func(args ...string) ([]byte, error) { return cp.Kubectl(ctx, nil, append(as, args...)...) }
	if _, err := kubectl("get", "fnr", "rbac"); err != nil {
		t.Errorf("get the rollout as the node: %v", err)
	}
	if out, err := kubectl("patch", "fnr", "rbac", "--subresource=status", "--type=merge", "-p", `{"status":{"selected":2,"observedGeneration":1}}`); err != nil {
		t.Errorf("write the rollout's status as the node: %v\n%s", err, out)
	}
	if out, err := kubectl("patch", "fnr", "rbac", "--type=merge", "-p", `{"spec":{"paused":true}}`); err == nil || !strings.Contains(string(out), "forbidden") {
		t.Errorf("patch the rollout's spec as the node: %v\n%s", err, out)
	}
	if out, err := kubectl("auth", "can-i", "create", v1alpha1.SlotResource+"."+v1alpha1.Group, "-n", "default"); err == nil || strings.TrimSpace(string(out)) != "no" {
		t.Errorf("can-i create slots in default: %v %s", err, out)
	}
	// Why the slots are not Leases: NodeRestriction refuses a node every
	// Lease outside kube-node-lease, whatever RBAC grants. If this starts
	// passing, Leases became possible and FlexNodeSlot can be reconsidered.
	lease := []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"rbac-probe","namespace":"` + v1alpha1.Namespace + `"}}`)
	if _, err := cp.Kubectl(ctx, []byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"lease-probe","namespace":"`+v1alpha1.Namespace+
		`"},"rules":[{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["create"]}]}`), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, nil, "create", "rolebinding", "lease-probe", "-n", v1alpha1.Namespace, "--role=lease-probe", "--group=system:nodes"); err != nil {
		t.Fatal(err)
	}
	out, err = cp.Kubectl(ctx, lease, append(as, "create", "-f", "-")...)
	if err == nil || !strings.Contains(string(out), "kube-node-lease") {
		t.Errorf("a Lease in %s as the node, RBAC allowing it: %v\n%s", v1alpha1.Namespace, err, out)
	}
}

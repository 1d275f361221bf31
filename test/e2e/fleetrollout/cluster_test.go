package fleetrollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// rollout is a FlexNodeRollout over every Node with rel, maxUnavailable
// and soak.
func rollout(name string, rel v1alpha1.Release, maxUnavailable int, soak time.Duration) *v1alpha1.FlexNodeRollout {
	mu := intstr.FromInt32(int32(maxUnavailable))
	return &v1alpha1.FlexNodeRollout{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RolloutSpec{
			NodeSelector: &metav1.LabelSelector{},
			Release:      rel,
			Strategy: v1alpha1.Strategy{MaxUnavailable: &mu, Soak: &metav1.Duration{Duration: soak},
				DrainTimeout: &metav1.Duration{Duration: 2 * time.Minute}},
		},
	}
}

// apply applies the rollout with kubectl, as an admin would.
func (e *env) apply(t *testing.T, ro *v1alpha1.FlexNodeRollout) {
	t.Helper()
	data, err := json.Marshal(ro)
	must(t, err)
	_, err = e.cp.Kubectl(e.ctx, data, "apply", "-f", "-")
	must(t, err)
}

// deleteRollout deletes the rollout with kubectl and waits for it to go.
func (e *env) deleteRollout(t *testing.T, name string) {
	t.Helper()
	_, err := e.cp.Kubectl(e.ctx, nil, "delete", "fnr", name, "--wait", "--timeout=60s")
	must(t, err)
}

// waitComplete is `kubectl wait --for=condition=Complete fnr/NAME`,
// bounded by timeout.
func (e *env) waitComplete(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	out, err := e.cp.Kubectl(e.ctx, nil, "wait", "--for=condition=Complete", fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())), "fnr/"+name)
	if err != nil {
		t.Fatalf("kubectl wait --for=condition=Complete fnr/%s: %v\n%s\n%s", name, err, out, e.describe(name))
	}
}

// describe is the rollout and its nodes as `fleet status` and kubectl
// show them, for a failure message.
func (e *env) describe(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ro, _ := e.cp.Kubectl(ctx, nil, "get", "fnr", name, "-o", "yaml")
	slots, _ := e.cp.Kubectl(ctx, nil, "get", "flexnodeslots", "-n", v1alpha1.Namespace, "-o", "yaml")
	st, _ := e.fleetCLI(ctx, "status", name)
	return fmt.Sprintf("rollout:\n%s\nslots:\n%s\nfleet status:\n%s", ro, slots, st)
}

// fleetCLI runs `aks-flex-node fleet ARGS` on this machine with the
// admin's kubeconfig, as an operator would.
func (e *env) fleetCLI(ctx context.Context, args ...string) (string, error) {
	out, err := runCtx(ctx, e.dist, append(append([]string{"fleet"}, args...), "--kubeconfig", e.cp.AdminKubeconfig)...)
	return out, err
}

// get is the rollout as the server has it.
func (e *env) get(t *testing.T, name string) *v1alpha1.FlexNodeRollout {
	t.Helper()
	ro, err := e.rollouts.Get(e.ctx, name)
	must(t, err)
	return ro
}

func condition(ro *v1alpha1.FlexNodeRollout, typ string) *metav1.Condition {
	return meta.FindStatusCondition(ro.Status.Conditions, typ)
}

// holders is who holds each slot of the rollout (holder node, and the
// failed reason when there is one), from the server.
func (e *env) holders(ctx context.Context, rollout string) (map[string]string, error) {
	store, err := fleet.NewSlotStore(e.cp.AdminConfig, nil, v1alpha1.Namespace)
	if err != nil {
		return nil, err
	}
	list, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list.Items {
		if !strings.HasPrefix(l.Name, rollout+"-slot-") || l.Spec.HolderIdentity == nil {
			continue
		}
		if h, ok := fleet.ParseHolder(*l.Spec.HolderIdentity); ok {
			out[h.Node] = l.Annotations[fleet.AnnotationFailedReason]
		}
	}
	return out, nil
}

// waitFor polls cond every second up to timeout; it fails t with what
// and the last error cond gave.
func (e *env) waitFor(t *testing.T, what string, timeout time.Duration, cond func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not after %v (last: %v)", what, timeout, last)
	}
}

// node is the Node as the server has it.
func (e *env) node(ctx context.Context, name string) (*corev1.Node, error) {
	return e.cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// release is the node's FlexNodeRelease condition.
func (e *env) release(ctx context.Context, name string) (fleet.NodeRelease, error) {
	n, err := e.node(ctx, name)
	if err != nil {
		return fleet.NodeRelease{}, err
	}
	r, ok, err := fleet.ReadNodeRelease(n)
	if err != nil || !ok {
		return r, fmt.Errorf("node %s: no FlexNodeRelease condition (%v)", name, err)
	}
	return r, nil
}

package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// soakUnits are the units in the machine whose restarts fail a soak.
var soakUnits = []string{node.KubeletUnitName, node.ContainerdUnitName}

// soakBaseline is what the soak compares with: the machine that serves
// after the switch, its units' restart counts then, and the DaemonSets
// that had a pod on the node before the drain.
type soakBaseline struct {
	machine  string
	restarts map[string]int
	pods     map[types.UID]string // DaemonSet UID -> namespace/name
}

// takeBaseline notes the active machine and its units' restarts now.
func (h *rolloutHost) takeBaseline(ctx context.Context) (*soakBaseline, error) {
	m := state.Open(h.layout).ActiveMachine()
	r, err := h.unitRestarts(ctx, m)
	if err != nil {
		return nil, err
	}
	return &soakBaseline{machine: m, restarts: r}, nil
}

// unitRestarts is each soak unit's NRestarts in machine m; a unit that is
// not active is an error.
func (h *rolloutHost) unitRestarts(ctx context.Context, m string) (map[string]int, error) {
	args := append([]string{"systemctl", "show", "-p", "ActiveState", "-p", "NRestarts"}, soakUnits...)
	out, err := h.control.Exec(ctx, m, args...)
	if err != nil {
		return nil, fmt.Errorf("systemctl show %s in machine %s: %w", strings.Join(soakUnits, " "), m, err)
	}
	return parseUnitRestarts(string(out))
}

// parseUnitRestarts reads systemctl show's blocks, one per soak unit in
// order, each "ActiveState=…" and "NRestarts=…".
func parseUnitRestarts(out string) (map[string]int, error) {
	blocks := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(blocks) != len(soakUnits) {
		return nil, fmt.Errorf("systemctl show printed %d blocks for %d units: %.200q", len(blocks), len(soakUnits), out)
	}
	res := map[string]int{}
	for i, b := range blocks {
		props := map[string]string{}
		for _, line := range strings.Split(b, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
				props[k] = v
			}
		}
		if st := props["ActiveState"]; st != "active" {
			return nil, fmt.Errorf("%s is %s, not active", soakUnits[i], st)
		}
		n, err := strconv.Atoi(props["NRestarts"])
		if err != nil {
			return nil, fmt.Errorf("%s: NRestarts %q: %w", soakUnits[i], props["NRestarts"], err)
		}
		res[soakUnits[i]] = n
	}
	return res, nil
}

// Healthy is one soak probe: the Node Ready, the kubelet and containerd
// active in the machine the switch moved the node to with no restart
// since, and a pod of every DaemonSet that had one on the node before
// the drain running on it again. After an agent restart mid-soak the
// baseline is taken at the first probe (restarts from then on; the
// DaemonSets noted before the drain are not known any more).
func (h *rolloutHost) Healthy(ctx context.Context) error {
	h.mu.Lock()
	b := h.baseline
	h.mu.Unlock()
	if b == nil {
		nb, err := h.takeBaseline(ctx)
		if err != nil {
			return &fleet.StepError{Step: fleet.StepSoak, Reason: "UnitNotRunning", Err: err}
		}
		h.mu.Lock()
		h.baseline, b = nb, nb
		h.mu.Unlock()
	}
	n, err := h.ownNode(ctx)
	if err != nil {
		return err
	}
	if !nodeReady(n) {
		return &fleet.StepError{Step: fleet.StepSoak, Reason: "NodeNotReady", Err: fmt.Errorf("Node %s is not Ready", h.nodeName)}
	}
	now, err := h.unitRestarts(ctx, b.machine)
	if err != nil {
		return &fleet.StepError{Step: fleet.StepSoak, Reason: "UnitNotRunning", Err: err}
	}
	for _, u := range soakUnits {
		if now[u] != b.restarts[u] {
			return &fleet.StepError{Step: fleet.StepSoak, Reason: "UnitRestarted",
				Err: fmt.Errorf("%s in machine %s restarted %d time(s) since the switch", u, b.machine, now[u]-b.restarts[u])}
		}
	}
	return h.podsBack(ctx, b)
}

// ownNode is the node's own Node as the process's informer holds it: a
// soak probes every few seconds for minutes, and a Ready a moment stale
// only moves the probe that sees it by that moment. The server is asked
// only before the informer holds it.
func (h *rolloutHost) ownNode(ctx context.Context) (*corev1.Node, error) {
	if h.nodes != nil {
		if n, ok := h.nodes.Node(h.nodeName); ok {
			return n, nil
		}
	}
	cs, err := h.client()
	if err != nil {
		return nil, fmt.Errorf("the node's credential: %w", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, h.nodeName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("get Node %s: %w", h.nodeName, err)
	}
	return n, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsBack is an error naming the DaemonSets of b with no running pod on
// the node.
func (h *rolloutHost) podsBack(ctx context.Context, b *soakBaseline) error {
	if len(b.pods) == 0 {
		return nil
	}
	pods, err := h.listPods(ctx)
	if err != nil {
		return err
	}
	running := map[types.UID]bool{}
	for _, p := range pods {
		if uid, ok := daemonSetOf(&p); ok && p.Status.Phase == corev1.PodRunning {
			running[uid] = true
		}
	}
	var missing []string
	for uid, name := range b.pods {
		if !running[uid] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return &fleet.StepError{Step: fleet.StepSoak, Reason: "PodsNotBack",
			Err: fmt.Errorf("no running pod on the node yet of DaemonSet(s) %s", strings.Join(missing, ", "))}
	}
	return nil
}

// daemonSetPods are the DaemonSets with a pod on the node now.
func (h *rolloutHost) daemonSetPods(ctx context.Context) (map[types.UID]string, error) {
	pods, err := h.listPods(ctx)
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for _, p := range pods {
		if uid, ok := daemonSetOf(&p); ok {
			ref := metav1.GetControllerOf(&p)
			out[uid] = p.Namespace + "/" + ref.Name
		}
	}
	return out, nil
}

func (h *rolloutHost) listPods(ctx context.Context) ([]corev1.Pod, error) {
	cs, err := h.client()
	if err != nil {
		return nil, fmt.Errorf("the node's credential: %w", err)
	}
	// From the API server's watch cache (resourceVersion 0; it indexes
	// pods by node): the soak asks every few seconds, and a list a moment
	// stale only delays the probe that sees the pods back.
	l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + h.nodeName, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list the pods on Node %s: %w", h.nodeName, err)
	}
	return l.Items, nil
}

func daemonSetOf(p *corev1.Pod) (types.UID, bool) {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "DaemonSet" {
		return "", false
	}
	return ref.UID, true
}

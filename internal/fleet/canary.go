package fleet

import (
	"crypto/sha256"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Order is the stable order in which a rollout's nodes go: by the
// SHA-256 of the rollout's UID and the node's name. Every agent computes
// the same order from the same names with nothing stored; a node added
// or removed moves no other node relative to the rest; two rollouts
// (two UIDs) order the same nodes differently, so one unlucky node is not
// always first.
func Order(uid types.UID, names []string) []string {
	type keyed struct {
		key  [sha256.Size]byte
		name string
	}
	ks := make([]keyed, len(names))
	for i, n := range names {
		ks[i] = keyed{sha256.Sum256([]byte(string(uid) + "\x00" + n)), n}
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].key != ks[j].key {
			return string(ks[i].key[:]) < string(ks[j].key[:])
		}
		return ks[i].name < ks[j].name
	})
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.name
	}
	return out
}

// Wave is which wave position pos of the order is in, as fleet status
// shows it: the canaries are wave 0 (when there are any), then each
// maxUnavailable nodes make a wave. Waves are how the order reads; the
// slots, not the waves, bound how many switch at once.
func Wave(pos, canary, maxUnavailable int) int {
	if pos < canary {
		return 0
	}
	w := (pos-canary)/max(maxUnavailable, 1) + 1
	if canary == 0 {
		w--
	}
	return w
}

// OrderRow is one node's place in a rollout, as fleet status shows it.
type OrderRow struct {
	Node     string
	Position int // 0-based, in Order
	Wave     int // 0 is the canaries when there are any
	Canary   bool
}

// RolloutOrder is the order r's agents follow over nodes (the selected
// ones that take part: not held, not managed elsewhere), with each
// node's wave: what `fleet status` shows so an operator sees who goes
// next. The same computation as MayStart's.
func RolloutOrder(r *v1alpha1.FlexNodeRollout, nodes []corev1.Node) ([]OrderRow, error) {
	sel, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector)
	if err != nil || r.Spec.NodeSelector == nil {
		return nil, fmt.Errorf("rollout %s: spec.nodeSelector: %v", r.Name, err)
	}
	var selected []*corev1.Node
	for i := range nodes {
		if sel.Matches(labels.Set(nodes[i].Labels)) {
			selected = append(selected, &nodes[i])
		}
	}
	v := readWave(r, selected)
	mu, err := v1alpha1.ResolveMaxUnavailable(r.Spec.Strategy.MaxUnavailable, len(selected))
	if err != nil {
		return nil, fmt.Errorf("rollout %s: spec.strategy.maxUnavailable: %w", r.Name, err)
	}
	canary, err := v1alpha1.ResolveCanary(r.Spec.Strategy.Canary, len(v.order))
	if err != nil {
		return nil, fmt.Errorf("rollout %s: spec.strategy.canary: %w", r.Name, err)
	}
	rows := make([]OrderRow, len(v.order))
	for i, n := range v.order {
		rows[i] = OrderRow{Node: n, Position: i, Wave: Wave(i, canary, mu), Canary: i < canary}
	}
	return rows, nil
}

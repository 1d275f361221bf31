package fleet

import (
	"crypto/sha256"
	"sort"

	"k8s.io/apimachinery/pkg/types"
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

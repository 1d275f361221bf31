package fleet

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// BenchmarkMayStart is one agent's gate decision over a fleet of n
// selected Nodes (its informer's view): what each pass costs a node
// that waits its turn, the order recomputed from nothing stored.
func BenchmarkMayStart(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			r := gateRollout()
			mu := intstr.FromString("10%")
			r.Spec.Strategy.MaxUnavailable = &mu
			nodes := make([]corev1.Node, 0, n)
			for i := range n {
				p := PhaseStaged
				if i%10 == 0 {
					p = PhaseUpdated
				}
				nodes = append(nodes, node(fmt.Sprintf("edge-%05d", i), "edge", r.Name, r.Generation, p))
			}
			self := nodes[n/2].Name
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := MayStart(StartInput{Rollout: r, Self: self, Nodes: nodes, Now: t0}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

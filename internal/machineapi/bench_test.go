package machineapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/Azure/aks-flex-node/internal/identity"
)

// BenchmarkRegisterCreate is one registration as start does it: a GET
// (404), the PUT with If-None-Match, one poll of the Azure-AsyncOperation
// and the final GET, over TLS to the fake ARM, each token fetched from
// the fake Entra tenant (start caches none). The waits ARM asks for
// (Retry-After) are recorded, not slept: the figure is the node's own
// cost and the round trips, not ARM's provisioning time.
func BenchmarkRegisterCreate(b *testing.B) {
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("tokenCached=%v", cached), func(b *testing.B) {
			e := newEnv(b)
			e.arm.SetPolling(1, "1")
			o := e.opts
			if !cached {
				o.Tokens = &identity.Source{Spec: e.spec}
			}
			want := Want{Version: "1.35.0", MaxPods: 110, Labels: map[string]string{"site": "edge"}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o.ID = testID(fmt.Sprintf("bench-%d", i))
				c, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				r, err := Register(context.Background(), c, want)
				if err != nil || r.Outcome != Created {
					b.Fatalf("%+v %v", r, err)
				}
			}
			b.ReportMetric(float64(len(e.arm.Requests()))/float64(b.N), "ARM-requests/op")
			b.ReportMetric(float64(e.tn.TokenRequests())/float64(b.N), "token-requests/op")
		})
	}
}

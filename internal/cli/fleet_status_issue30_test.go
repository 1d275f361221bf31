package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func TestWriteStatus30(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC))
	v := rolloutView{Name: "edge-b", Status: v1alpha1.RolloutStatus{StatusExtras: v1alpha1.StatusExtras{
		Held: 1, HeldNodes: []string{"edge-9"},
		Plan:     &v1alpha1.PlanStatus{Ready: 198, NotReady: 2},
		Rollback: &v1alpha1.RollbackStatus{Reason: "pods crash", RequestedBy: "fleet rollback", RolledBack: 3, RequestedAt: &at},
		Window:   &v1alpha1.WindowStatus{NextOpen: &at},
	}}, status30: status30{Mode: "Plan", Order: []fleet.OrderRow{{Node: "edge-3", Position: 0, Canary: true}, {Node: "edge-1", Position: 1, Wave: 1}}}}
	var b bytes.Buffer
	writeStatus30(&b, v)
	out := b.String()
	for _, want := range []string{"mode Plan", "plan: 198 ready, 2 not ready", "held (flexnode.azure.com/hold=true): edge-9",
		"rollback (pods crash, by fleet rollback): 3 back, asked 2026-12-06T22:00:00Z", "the next opens 2026-12-06T22:00:00Z",
		"1      edge-3  canary", "2      edge-1  1"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	writeStatus30(&b, rolloutView{})
	if b.Len() != 0 {
		t.Errorf("a rollout without issue 30's fields printed %q", b.String())
	}
}

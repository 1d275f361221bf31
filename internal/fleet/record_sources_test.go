package fleet

import (
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
)

// Line is what status and debug print of the record: every field an
// operator needs to find the node in the rollout, none left out silently.
func TestRecordLine(t *testing.T) {
	r := Record{Rollout: "r1", Generation: 2, Phase: PhaseFailed, Step: "soak", Reason: "KubeletRestarts", Slot: "r1-slot-0",
		Since: time.Date(2026, 12, 6, 7, 0, 0, 0, time.FixedZone("x", 3600)), Message: "kubelet restarted 3 times"}
	want := "rollout r1 generation 2: Failed at step soak since 2026-12-06T06:00:00Z (KubeletRestarts); holds slot r1-slot-0: kubelet restarted 3 times"
	if got := r.Line(); got != want {
		t.Errorf("Line() =\n%s\nwant\n%s", got, want)
	}
	if got := (Record{}).Line(); got != "rollout none generation 0: none; holds no slot" {
		t.Errorf("empty record: %s", got)
	}
	// From names the release as Overlay's sources do.
	a := &AppliedRelease{Rollout: "r1", Generation: 2}
	a.Release.KubernetesVersion = "v1.35.4"
	_, src := a.Overlay(&config.Config{})
	if len(src) != 1 || a.From() != src[0].From || (*AppliedRelease)(nil).From() != "" {
		t.Errorf("From() = %q, Overlay's sources %v", a.From(), src)
	}
}

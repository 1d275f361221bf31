package agentupgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// TestArmTimerRetriesACanceledStart: a recovery check stopping the timer
// cancels a start queued behind it; the upgrade must not fail on that.
func TestArmTimerRetriesACanceledStart(t *testing.T) {
	var calls []string
	fails := 2
	m := &systemd.Manager{Root: "/", Exec: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		if fails > 0 {
			fails--
			return []byte("Job for " + layout.RecoveryTimer + " canceled."), errors.New("exit status 1")
		}
		return nil, nil
	}}
	if err := armTimer(context.Background(), m); err != nil {
		t.Fatalf("armTimer: %v", err)
	}
	if len(calls) != 3 || calls[2] != "systemctl start "+layout.RecoveryTimer {
		t.Fatalf("calls %q, want three starts of the timer", calls)
	}

	// A start that keeps failing is an error, after a bounded number of tries.
	calls, fails = nil, 100
	err := armTimer(context.Background(), m)
	if err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("armTimer with every start failing = %v, want the systemctl error", err)
	}
	if len(calls) != 5 {
		t.Errorf("%d starts, want 5", len(calls))
	}
}

package systemd

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// A fresh install enables the agent and the units handed along in one
// systemctl call (one reload of systemd), then starts the agent; a
// converged one neither enables nor reloads.
func TestInstallAgentServiceEnablesOnce(t *testing.T) {
	l, err := layout.New(t.TempDir(), "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	enabled := map[string]bool{}
	var calls []string
	m := &Manager{Root: "/", Exec: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, strings.Join(args, " "))
		switch args[0] {
		case "is-enabled":
			if !enabled[args[2]] {
				return nil, errors.New("disabled")
			}
		case "enable":
			for _, u := range args[1:] {
				enabled[u] = true
			}
		case "show":
			if enabled["started"] {
				return []byte("active\n"), nil
			}
			return []byte("inactive\n"), nil
		case "start":
			enabled["started"] = true
		}
		return nil, nil
	}}
	log := slog.New(slog.DiscardHandler)
	if changed, err := InstallAgentService(t.Context(), l, m, log, "x.timer"); err != nil || !changed {
		t.Fatalf("fresh install: %v %v", changed, err)
	}
	want := "is-enabled --quiet aks-flex-node-agent.service\nenable aks-flex-node-agent.service x.timer\nshow --property=ActiveState --value aks-flex-node-agent.service\nreset-failed aks-flex-node-agent.service\nstart aks-flex-node-agent.service"
	if got := strings.Join(calls, "\n"); got != want {
		t.Errorf("fresh install ran:\n%s\nwant:\n%s", got, want)
	}
	calls = nil
	if changed, err := InstallAgentService(t.Context(), l, m, log); err != nil || changed {
		t.Fatalf("converged install: %v %v", changed, err)
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "enable") || strings.HasPrefix(c, "daemon-reload") || strings.HasPrefix(c, "start") {
			t.Errorf("converged install ran %q", c)
		}
	}
}

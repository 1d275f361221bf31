package systemd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/Azure/aks-flex-node/internal/layout"
)

func TestAgentUnitNamesTheLayout(t *testing.T) {
	l, err := layout.New("/", "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	text, err := AgentUnit(l)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := unit.DeserializeOptions(strings.NewReader(text))
	if err != nil {
		t.Fatalf("rendered unit does not parse: %v", err)
	}
	got := map[string]string{}
	for _, o := range opts {
		got[o.Section+"."+o.Name] = o.Value
	}
	want := map[string]string{
		"Service.ExecStart":                "/opt/aks-flex-node/lib/current agent --config /etc/aks-flex-node/config.json",
		"Service.ExecStopPost":             "-/opt/aks-flex-node/lib/aks-flex-node-recovery.sh agent-stopped",
		"Unit.OnFailure":                   "aks-flex-node-recovery.service",
		"Service.Restart":                  "on-failure",
		"Service.RestartPreventExitStatus": "2",
		"Unit.StartLimitBurst":             "5",
		"Install.WantedBy":                 "multi-user.target",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestAgentUnitRefusesUnsafePaths(t *testing.T) {
	l, _ := layout.New("/", "", "")
	if _, err := AgentUnit(l.WithConfigFile("/etc/aks flex/config.json")); err == nil {
		t.Fatal("rendered a unit with a space in the config path")
	}
	if _, err := AgentUnit(layout.Layout{}); !errors.Is(err, layout.ErrNotFromNew) {
		t.Fatalf("rendered a unit from a layout layout.New did not make: %v", err)
	}
}

func TestManagerOfflineRoot(t *testing.T) {
	var calls []string
	m := &Manager{Root: "/img", Exec: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		return nil, nil
	}}
	if err := m.Enable(context.Background(), "x.service"); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), "x.service"); err == nil {
		t.Fatal("Start on an offline root succeeded")
	}
	if err := m.DaemonReload(context.Background()); err != nil || len(calls) != 1 || calls[0] != "systemctl --root=/img enable x.service" {
		t.Fatalf("calls %v err %v", calls, err)
	}
}

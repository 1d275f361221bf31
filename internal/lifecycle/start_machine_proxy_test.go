package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

// A node whose config changed restarts the agent's kube-proxy with the
// kubelet when write-node-config wrote its unit, and stops a running one
// it no longer wrote (networking.kubeProxy went to daemonset).
func TestStartMachineRestartsOrStopsKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		unit         bool
		active, want string
	}{
		{true, "active", "restart kube-proxy.service"},
		{false, "active", "stop kube-proxy.service"},
		{false, "inactive", ""},
	} {
		l, _ := layout.New(t.TempDir(), "", "")
		var calls []string
		run := func(_ context.Context, name string, args ...string) ([]byte, error) {
			call := name + " " + strings.Join(args, " ")
			calls = append(calls, call)
			switch {
			case name == "systemctl" && args[0] == "show":
				return []byte("ActiveState=active\n"), nil
			case name == "machinectl" && args[0] == "show":
				return []byte("1234\n"), nil
			case strings.Contains(call, "is-active kube-proxy.service"):
				return []byte(tc.active + "\n"), nil
			}
			return nil, nil
		}
		m := NewMachine(l, layout.MachineBlue, run)
		if tc.unit {
			p := filepath.Join(m.Root(), node.KubeProxyUnitFile)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("[Unit]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		nodeConfig := task.NewOutput[bool]("write-node-config")
		nodeConfig.Set(true)
		if _, err := StartMachine(m, unchanged("write-nspawn-files"), nodeConfig).Do(context.Background()); err != nil {
			t.Fatal(err)
		}
		all := strings.Join(calls, "\n")
		for _, verb := range []string{"restart kube-proxy.service", "stop kube-proxy.service"} {
			if strings.Contains(all, verb) != (verb == tc.want) {
				t.Errorf("unit %v, kube-proxy %s: calls %q", tc.unit, tc.active, calls)
			}
		}
	}
}

package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// The loop exists only when hostRouting asks for routes, is local (it
// needs nothing remote after a reboot), and leaves a host that has not
// joined alone.
func TestKeepHostRoutesLoop(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Config{}
	if KeepHostRoutes(l, c, slog.New(slog.DiscardHandler)) != nil {
		t.Fatal("a loop without static routes")
	}
	c.HostRouting.StaticRoutes = config.StaticRoutes{Routes: []config.StaticRoute{{Destination: "10.30.0.0/16", Dev: "eth1"}}}
	if KeepHostRoutes(l, c, slog.New(slog.DiscardHandler)) != nil {
		t.Fatal("a loop while hostRouting.staticRoutes is not enabled")
	}
	c.HostRouting.StaticRoutes.Enabled = true
	loop := KeepHostRoutes(l, c, slog.New(slog.DiscardHandler))
	if loop == nil || !loop.Local || loop.Name != "keep-host-routes" {
		t.Fatalf("loop %+v", loop)
	}
	// Not joined: nothing to keep, and no route is touched (the test
	// would need ip and root otherwise).
	if err := loop.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Another loop of this agent holding the lock (keep-host-routes at boot)
// does not cost keep-machine its pass: it waits the moment the other
// holds it, then starts the machine.
func TestMachineKeeperWaitsForAnotherLoop(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		if name == "systemctl" {
			return []byte("ActiveState=inactive\n"), nil
		}
		return nil, nil
	}
	held, err := nodelock.TryAcquire(l, "agent "+keepHostRoutesLoop)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond) // the other loop's short change
		held.Release()
	}()
	k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run}, Log: slog.New(slog.DiscardHandler)}
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-released
	if len(calls) != 3 || calls[2] != "machinectl start "+layout.MachineBlue { // the state of each side, then the start
		t.Fatalf("the keeper did not start the machine after the other loop: %q", calls)
	}
}

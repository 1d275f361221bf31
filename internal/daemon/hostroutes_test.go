package daemon

import (
	"context"
	"log/slog"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
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

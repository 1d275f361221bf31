package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
)

// keepHostRoutesLoop names the loop in logs and as the node lock's holder.
const keepHostRoutesLoop = "keep-host-routes"

// KeepHostRoutes is the agent's local loop that keeps hostRouting's
// static routes on a joined host. Routes live in the kernel only, so a
// reboot drops them; the agent, which systemd starts at boot, puts them
// back (and one someone deleted) the same way start's apply-host-routes
// adds them. This is simpler than a unit of its own: the agent already
// runs at boot to bring the machine back, and it holds the node lock
// that keeps it from racing a reset. nil when the config asks for none.
func KeepHostRoutes(l layout.Layout, c *config.Config, log *slog.Logger) *Loop {
	want := network.StaticRoutes(c)
	if len(want) == 0 {
		return nil
	}
	joined := func() (bool, error) {
		_, err := os.Stat(l.OnRoot(l.JoinedMarker()))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	return &Loop{Name: keepHostRoutesLoop, Local: true, Run: func(ctx context.Context) error {
		if ok, err := joined(); err != nil || !ok {
			return err
		}
		release, ok, err := lockOrSkip(l, log, keepHostRoutesLoop)
		if err != nil || !ok {
			return err
		}
		defer release()
		// A reset may have finished between the first look and the lock.
		if ok, err := joined(); err != nil || !ok {
			return err
		}
		changed, err := network.Routes{}.Apply(ctx, want)
		if err != nil {
			return fmt.Errorf("keep host routes: %w", err)
		}
		if changed {
			log.Info(keepHostRoutesLoop+": put hostRouting's static routes back", "routes", len(want))
		}
		return nil
	}}
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/config"
)

// WaitForConfig waits for the config file at path to appear: a unit
// started before Ignition or an operator put the file in place should
// wait, not crash-loop. nil, nil means ctx ended while waiting. An invalid
// config returns its *config.InvalidError at once: waiting would not fix
// it.
func WaitForConfig(ctx context.Context, path string, log *slog.Logger) (*config.Config, error) {
	var c *config.Config
	var lastErr error
	b := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
	noJitter := func(d time.Duration) time.Duration { return d }
	err := retry(ctx, b, noJitter, func(d time.Duration) {
		log.Info("waiting", "for", "config file "+path, "error", lastErr, "retry-in", d)
	}, func(context.Context) (bool, error) {
		c, lastErr = config.Load(path)
		var ie *config.InvalidError
		switch {
		case lastErr == nil:
			for _, n := range c.Notes() {
				log.Warn("config: deprecated: "+n, "config", path)
			}
			return true, nil
		case errors.As(lastErr, &ie):
			return false, lastErr
		case !errors.Is(lastErr, fs.ErrNotExist):
			return false, fmt.Errorf("config: %w", lastErr)
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, nil
	}
	return c, err
}

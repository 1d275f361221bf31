package diag

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// Skew thresholds. The Date header has one-second resolution, so a skew
// under two seconds cannot be told from none. Past a minute, certificates
// the cluster just issued are not yet valid here and tokens are refused.
const (
	skewWarning = 2 * time.Second
	skewError   = time.Minute
)

// checkClockSkew: this host's clock agrees with the API server's, read
// from the Date header of its fastest answer.
func checkClockSkew(e *Env) preflight.Check {
	return preflight.NewCheck(NameClockSkew, "the API server's Date header", func(ctx context.Context) preflight.Result {
		p := e.apiServer(ctx)
		if p.date.IsZero() {
			return preflight.Warning("see api-server", "not measured: the API server did not answer")
		}
		// The server stamped its answer between sent and received; Date
		// drops the fraction of its second.
		rtt := p.received.Sub(p.sent)
		local := p.sent.Add(rtt / 2)
		skew := p.date.Add(500 * time.Millisecond).Sub(local)
		bound := 500*time.Millisecond + rtt/2
		abs := skew
		if abs < 0 {
			abs = -abs
		}
		dir := "ahead of"
		if skew > 0 {
			dir = "behind"
		}
		remedy := "enable time synchronisation on this host (systemd-timesyncd or chrony, from the same source as the cluster); the machine shares the host's clock"
		switch {
		case abs-bound > skewError:
			return preflight.Error(remedy, "this host's clock is %s %s the API server's (%s says %s)", abs.Round(time.Second), dir, p.server, p.date.UTC().Format(time.RFC1123))
		case abs-bound > skewWarning:
			return preflight.Warning(remedy, "this host's clock is %s %s the API server's", abs.Round(100*time.Millisecond), dir)
		}
		return preflight.OK("within %s of the API server's (%s)", (abs + bound).Round(100*time.Millisecond), p.date.UTC().Format(time.RFC1123))
	})
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// AnnouncedFile, in the state dir, holds the time of the last upgrade
// result the agent recorded as an Event, so each rollback is told once,
// whichever agent (the rolled-back one after a restart, or after a
// reboot) reads it first.
const AnnouncedFile = "upgrade-result-announced"

// ReportUpgradeOutcome is the loop that records an agent rollback as a
// RolledBack Event on the Node. A rollback is done by the recovery script
// (it cannot count on the agent that failed), which cannot reach the
// cluster; the agent it restored tells the cluster once it can. Remote: it
// needs the API server.
func ReportUpgradeOutcome(l layout.Layout, rec *events.Recorder) Loop {
	return Loop{Name: "report-upgrade-outcome", Run: func(ctx context.Context) error {
		return reportUpgradeOutcome(ctx, l, rec)
	}}
}

func reportUpgradeOutcome(ctx context.Context, l layout.Layout, rec *events.Recorder) error {
	res, err := agentupgrade.LoadResult(l)
	if err != nil || res == nil || res.Result != agentupgrade.ResultRolledBack {
		return err
	}
	path := l.OnRoot(l.StateDir() + "/" + AnnouncedFile)
	seen, err := fsutil.ReadRegular(path, 4096)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if strings.TrimSpace(string(seen)) == res.Time {
		return nil
	}
	if err := rec.Warning(ctx, events.ReasonRolledBack, "agent upgrade %s (%s) -> %s (%s) rolled back by %s at %s: %s",
		res.FromVersion, res.FromSlot, res.ToVersion, res.ToSlot, res.By, res.Time, res.Reason); err != nil {
		return err // told at the next pass
	}
	if _, err := os.Stat(l.OnRoot(l.StateDir())); err != nil {
		return nil // reset since
	}
	_, err = fsutil.WriteFile(path, []byte(res.Time+"\n"), 0o600)
	return err
}

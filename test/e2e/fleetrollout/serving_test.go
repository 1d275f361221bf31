package fleetrollout

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// stoppedLine is the repave's stop of the serving machine in the agent's
// journal (short-iso-precise): its end and how long it took.
var stoppedLine = regexp.MustCompile(`(?m)^(\S+) \S+ aks-flex-node\[\d+\]: level=INFO msg=task task=stop-active-machine status=ok changed=true duration=(\S+)`)

// machineStops are the times the host's agent began stopping its
// serving machine (a repave's switch) since since, from its journal.
func (m *host) machineStops(ctx context.Context, since time.Time) ([]time.Time, error) {
	out, _, err := m.h.Run(ctx, "journalctl", "--no-pager", "-o", "short-iso-precise", "-u", "aks-flex-node-agent",
		"--since", since.UTC().Format("2006-01-02 15:04:05"), "--utc")
	if err != nil {
		return nil, fmt.Errorf("%s: journalctl: %w", m.name, err)
	}
	var stops []time.Time
	for _, l := range stoppedLine.FindAllStringSubmatch(out, -1) {
		ended, err := time.Parse("2006-01-02T15:04:05.999999-0700", l[1])
		if err != nil {
			ended, err = time.Parse(time.RFC3339Nano, l[1])
		}
		if err != nil {
			return nil, fmt.Errorf("%s: journal time %q: %w", m.name, l[1], err)
		}
		took, err := time.ParseDuration(l[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", m.name, l[2], err)
		}
		stops = append(stops, ended.Add(-took))
	}
	return stops, nil
}

// servingGap is, for host m, from its last machine stop since since to
// the first Ready heartbeat its new kubelet posted: the window the node
// served nothing, as its own journal and the API server show it.
func (e *env) servingGap(ctx context.Context, m *host, w *nodeWatch, since time.Time) (time.Duration, error) {
	stops, err := m.machineStops(ctx, since)
	if err != nil {
		return 0, err
	}
	if len(stops) == 0 {
		return 0, fmt.Errorf("%s: no stop-active-machine in its agent's journal since %s", m.name, since.UTC().Format(time.RFC3339))
	}
	stopped := stops[len(stops)-1]
	ready := w.firstReadyAfter(m.name, stopped)
	if ready.IsZero() {
		return 0, fmt.Errorf("%s: no Ready heartbeat seen after its machine stopped at %s", m.name, stopped.UTC().Format(time.RFC3339Nano))
	}
	return ready.Sub(stopped), nil
}

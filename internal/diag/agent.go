package diag

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkAgent: the agent runs, says it is healthy on its socket, its loops
// pass, and no agent upgrade is stuck in flight.
func checkAgent(e *Env) preflight.Check {
	return preflight.NewCheck(NameAgent, layout.AgentUnitName+" and "+e.Layout.AgentSocket(), func(ctx context.Context) preflight.Result {
		p := e.units(ctx)
		st, ok := p.host[layout.AgentUnitName]
		logs := "journalctl -u " + layout.AgentUnitName
		switch {
		case p.hostErr != nil:
			return preflight.Error("check that systemd runs this host (systemctl status)", "systemctl show %s: %v", layout.AgentUnitName, p.hostErr)
		case !ok || st.Active != "active":
			return preflight.Error("systemctl start "+layout.AgentUnitName+"; nothing restarts the machine after a reboot without it; why it stopped: "+logs,
				"%s is %s (result %s), restarts %d", layout.AgentUnitName, st, orUnknown(st.Result), st.Restarts)
		}
		var notes []string
		if in, err := agentupgrade.LoadInFlight(e.Layout); err != nil {
			notes = append(notes, "upgrade record unreadable: "+err.Error())
		} else if in != nil {
			msg := fmt.Sprintf("agent upgrade %s -> %s in flight, deadline %s", in.FromVersion, in.ToVersion, in.Deadline.UTC().Format(time.RFC3339))
			if e.now().After(in.Deadline.Add(time.Minute)) {
				return preflight.Error("recovery should have rolled it back: systemctl start "+layout.RecoveryUnit+"; see aks-flex-node status and journalctl -u "+layout.RecoveryUnit, "%s, passed", msg)
			}
			notes = append(notes, msg)
		}
		h, code, err := e.agentHealth(ctx)
		if err != nil {
			return preflight.Warning("the agent serves its socket once the state dir exists; see "+logs, "%s is %s, but %s does not answer: %v", layout.AgentUnitName, st, e.Layout.AgentSocket(), err)
		}
		var failing []string
		loops := make([]string, 0, len(h.Loops))
		for name := range h.Loops {
			loops = append(loops, name)
		}
		sort.Strings(loops)
		for _, name := range loops {
			l := h.Loops[name]
			switch {
			case l.Failing:
				failing = append(failing, fmt.Sprintf("%s failing since %s: %s", name, l.LastErrorAt.UTC().Format(time.RFC3339), l.LastError))
			case l.LastSuccess != nil:
				notes = append(notes, fmt.Sprintf("%s passed %s ago", name, e.now().Sub(*l.LastSuccess).Round(time.Second)))
			}
		}
		if h.WaitingFor != "" {
			notes = append(notes, "waiting for "+h.WaitingFor)
		}
		summary := fmt.Sprintf("%s %s, version %s, restarts %d", layout.AgentUnitName, st, h.Version, st.Restarts)
		switch {
		case code != http.StatusOK:
			return preflight.Error(logs, "%s: unhealthy: %s", summary, strings.Join(append(failing, notes...), "; "))
		case len(failing) > 0:
			return preflight.Warning(logs, "%s: %s", summary, strings.Join(append(failing, notes...), "; "))
		}
		if len(notes) == 0 {
			notes = append(notes, "no upgrade in flight")
		}
		return preflight.OK("%s: %s", summary, strings.Join(notes, "; "))
	})
}

// agentHealth asks the agent's /healthz on its socket.
func (e *Env) agentHealth(ctx context.Context) (daemon.HealthReport, int, error) {
	var h daemon.HealthReport
	sock := e.Layout.OnRoot(e.Layout.AgentSocket())
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/healthz", nil)
	if err != nil {
		return h, 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return h, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return h, resp.StatusCode, err
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return h, resp.StatusCode, fmt.Errorf("/healthz: %w", err)
	}
	return h, resp.StatusCode, nil
}

package fleetrollout

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

// The agent binaries of agentRelease: the release's, built with another
// version, and a broken one that passes the version check and exits 1
// when run as the agent.
const (
	nextAgentVersion = "v1.0.1-e2e"
	e2eCAFile        = "/etc/ssl/certs/aks-flex-node-e2e-ca.pem"
)

// agentRelease (issue 30 item 5): a release with a new agent binary,
// served over https at one port on every host's loopback, upgrades every
// agent (one node at a time) and completes, with no machine switched; a
// release of a broken agent binary (right checksum, exits 1) pauses the
// rollout on the first node, which is back on its last-good agent,
// Failed at agent and holding its slot, while the others stay staged.
func (e *env) agentRelease(t *testing.T) {
	// The scenario before leaves its rollout (to-e), and the oldest
	// rollout that selects a node is the one it follows: start clean.
	_, err := e.cp.Kubectl(e.ctx, nil, "delete", "fnr", "--all", "--wait", "--timeout=60s")
	must(t, err)
	dist := t.TempDir()
	nextPath := filepath.Join(dist, "aks-flex-node-next")
	cmd := exec.Command("go", "build", "-trimpath", "-o", nextPath, "-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version="+nextAgentVersion, "./cmd/aks-flex-node")
	cmd.Dir, cmd.Env = repoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the release's agent: %v\n%s", err, b)
	}
	next, err := os.ReadFile(nextPath)
	must(t, err)
	broken := []byte("#!/bin/sh\nif [ \"$1\" = version ]; then\n\techo '{\"version\":\"v1.0.2-e2e\",\"gitCommit\":\"e2e\",\"buildTime\":\"e2e\"}'\n\texit 0\nfi\nexit 1\n")
	base := e.serveAgentBinaries(t, map[string][]byte{"/next": next, "/broken": broken})
	sides := map[string]string{}
	for _, m := range e.hosts {
		s, err := m.status(e.ctx)
		must(t, err)
		sides[m.name] = s.Active
	}

	began := time.Now()
	e.apply(t, rollout("agent-next", v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: base + "/next", SHA256: sha256Hex(next)}}, 1, 5*time.Second))
	e.waitComplete(t, "agent-next", 10*time.Minute)
	t.Logf("BENCH agent-only release of %d nodes, maxUnavailable 1, soak 5s: apply to Complete %v", len(e.hosts), time.Since(began).Round(100*time.Millisecond))
	for _, m := range e.hosts {
		if v := agentVersionOf(t, m); v != nextAgentVersion {
			t.Errorf("%s runs agent %s, want %s", m.name, v, nextAgentVersion)
		}
		if s, err := m.status(e.ctx); err != nil || s.Active != sides[m.name] {
			t.Errorf("%s: an agent-only release switched the machine: %s, was %s (%v)", m.name, s.Active, sides[m.name], err)
		}
	}
	// fleet status shows each node's agent (the Node's annotation its
	// new agent wrote at its start).
	e.waitFor(t, "fleet status naming every node's agent "+nextAgentVersion, time.Minute, func(ctx context.Context) error {
		out, err := e.fleetCLI(ctx, "status", "agent-next")
		if err != nil {
			return err
		}
		for _, m := range e.hosts {
			if !strings.Contains(out, m.name) || !lineHas(out, m.name, nextAgentVersion) {
				return fmt.Errorf("no %s line with %s in\n%s", m.name, nextAgentVersion, out)
			}
		}
		return nil
	})
	e.deleteRollout(t, "agent-next")

	began = time.Now()
	e.apply(t, rollout("agent-broken", v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: base + "/broken", SHA256: sha256Hex(broken)}}, 1, 5*time.Second))
	var failed string
	e.waitFor(t, "a node Failed at agent in agent-broken", 5*time.Minute, func(ctx context.Context) error {
		for _, m := range e.hosts {
			nr, err := e.release(ctx, m.name)
			if err == nil && nr.Rollout == "agent-broken" && nr.Phase == fleet.PhaseFailed {
				failed = m.name
				return nil
			}
		}
		return fmt.Errorf("none failed yet")
	})
	t.Logf("BENCH broken agent release: apply to the first node Failed %v", time.Since(began).Round(100*time.Millisecond))
	e.checkPausedOn(t, "agent-broken", failed)
	for _, m := range e.hosts {
		nr, err := e.release(e.ctx, m.name)
		must(t, err)
		switch {
		case m.name == failed && (nr.Step != fleet.StepAgent || nr.Reason != fleet.ReasonAgentRolledBack):
			t.Errorf("%s: %s, want Failed at agent (AgentRolledBack)", m.name, nr)
		case m.name != failed && nr.Phase != fleet.PhaseStaged:
			t.Errorf("%s: %s, want Staged (the rollout paused)", m.name, nr)
		}
		if v := agentVersionOf(t, m); v != nextAgentVersion {
			t.Errorf("%s runs agent %s, want the last-good %s", m.name, v, nextAgentVersion)
		}
	}
	e.deleteRollout(t, "agent-broken")
}

// serveAgentBinaries serves files over https at one port on every host's
// loopback (a listener in each host's network namespace, served here),
// with a CA made here put in each host's trust store; each agent is
// restarted to read it (Go reads the system roots once per process).
func (e *env) serveAgentBinaries(t *testing.T, files map[string][]byte) string {
	t.Helper()
	caPEM, cert := kubetest.LoopbackServingCert(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	addr := "127.0.0.1:0"
	for _, m := range e.hosts {
		ln, err := aclhost.ListenInNetNS(m.ns, addr)
		must(t, err)
		// Every namespace is the test's own: the port free in the first
		// is free in the others.
		addr = "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
		go func() { _ = srv.ServeTLS(ln, "", "") }()
		t.Cleanup(func() { _ = srv.Close() })
		must(t, m.h.WriteFile(e2eCAFile, caPEM, 0o644))
		m.h.RunOK(t, "systemctl", "restart", "aks-flex-node-agent")
	}
	return "https://" + addr
}

// agentVersionOf is the version the host's running agent service reports.
func agentVersionOf(t *testing.T, m *host) string {
	t.Helper()
	out := m.h.RunOK(t, "/bin/sh", "-c", `exe=$(readlink -f /proc/$(systemctl show -p MainPID --value aks-flex-node-agent)/exe) && "$exe" version --output json`)
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &v); err != nil {
		t.Fatalf("%s: the running agent's version: %v: %s", m.name, err, out)
	}
	return v.Version
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// lineHas says whether a line of out that starts (after spaces) with
// first contains want.
func lineHas(out, first, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), first+" ") && strings.Contains(l, want) {
			return true
		}
	}
	return false
}

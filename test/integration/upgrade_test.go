package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

const (
	fpPkg       = "github.com/Azure/aks-flex-node/internal/failpoint"
	aclPrefix   = "/opt/aks-flex-node"
	agentUnit   = "aks-flex-node-agent.service"
	dropInDir   = "/etc/systemd/system/" + agentUnit + ".d"
	dropInPath  = dropInDir + "/failpoint.conf"
	convergeMax = 60 * time.Second
)

// The upgrade builds. v2 differs from agentBinary (v1.0.0-test) only in
// its -ldflags version. The v3 builds are honest test builds: the
// failpoints tag plus a failpoint baked in with -ldflags, so the product
// has no "misbehave" switch. fp1/fp2 are failpoints builds for the crash
// tests, where the test sets the failpoint per run.
var (
	buildsOnce sync.Once
	buildsErr  error
	builds     = map[string]struct{ version, tags, ldflags string }{
		"v2":     {"v2.0.0", "", ""},
		"v3exit": {"v3.0.0-exit", "failpoints", "-X " + fpPkg + ".baked=" + agentupgrade.StepAgentStart + ":exit1"},
		"v3hang": {"v3.0.0-hang", "failpoints", "-X " + fpPkg + ".baked=" + agentupgrade.StepConfirm + ":skip"},
		"fp1":    {"v1.0.0-fp", "failpoints", ""},
		"fp2":    {"v2.0.0-fp", "failpoints", ""},
	}
)

func buildPath(name string) string {
	if name == "v1" {
		return agentBinary
	}
	return filepath.Join(distDir, "aks-flex-node-"+name)
}

func ensureBuilds(t *testing.T) {
	t.Helper()
	buildsOnce.Do(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for name, b := range builds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := buildAgentWith(buildPath(name), b.version, b.tags, b.ldflags); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		buildsErr = errors.Join(errs...)
	})
	if buildsErr != nil {
		t.Fatal(buildsErr)
	}
}

// upHost is a test host with the agent installed and its service running.
type upHost struct {
	*aclhost.Host
	prefix string
	bin    string // the layout's agentBinary
	lib    string
	cfg    string
}

// newUpgradeHost boots a host, installs base with install.sh and
// install-service (which seeds the slots), and stages every build.
func newUpgradeHost(t *testing.T, v aclhost.Variant, prefix, base, name string) *upHost {
	t.Helper()
	aclhost.RequireE2E(t)
	ensureBuilds(t)
	h := aclhost.MustStart(t, aclhost.Options{Variant: v, Name: name})
	u := &upHost{Host: h, prefix: prefix, cfg: "/etc/aks-flex-node/config.json",
		bin: "/usr/local/bin/aks-flex-node", lib: "/usr/local/lib/aks-flex-node"}
	if prefix != "" {
		u.bin, u.lib = prefix+"/bin/aks-flex-node", prefix+"/lib"
	}
	must(t, h.CopyIn(buildPath(base), "/root/dist/aks-flex-node", 0o755))
	must(t, h.WriteFile("/root/dist/aks-flex-node.sha256", []byte(fileSHA256(t, buildPath(base))+"  aks-flex-node\n"), 0o644))
	must(t, h.CopyIn(filepath.Join(repoRoot(), "scripts", "install.sh"), "/root/dist/install.sh", 0o755))
	for _, n := range []string{"v1", "v2", "v3exit", "v3hang", "fp1", "fp2"} {
		must(t, h.CopyIn(buildPath(n), "/root/dist/"+n, 0o755))
	}
	must(t, h.WriteFile(u.cfg, testConfig(t, prefix), 0o600))
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	out := h.RunOK(t, u.bin, "install-service", "--config", u.cfg)
	if !strings.Contains(out, "ExecStart="+u.lib+"/current agent") {
		t.Errorf("install-service: %s", out)
	}
	waitActive(t, h, agentUnit)
	return u
}

type upgradeStatus struct {
	CurrentVersion string `json:"currentVersion"`
	Current        struct {
		Slot, Error string
	} `json:"current"`
	LastGood struct {
		Slot, Error string
	} `json:"lastGood"`
	Slots []struct {
		Name, Version, Error string
		Present              bool
	} `json:"slots"`
	InFlight *struct {
		ToVersion string `json:"toVersion"`
	} `json:"inFlight"`
	Last *struct {
		Result, Reason, FromVersion, ToVersion, By string
	} `json:"lastResult"`
}

func (u *upHost) status(t *testing.T) upgradeStatus {
	t.Helper()
	var s upgradeStatus
	out := u.RunOK(t, u.bin, "status", "--config", u.cfg, "--output", "json")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	return s
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -2
	}
	return 0
}

// upgradeTo runs agent-upgrade to a staged build, with env set for it.
func (u *upHost) upgradeTo(t *testing.T, env []string, build string, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	cmd := append([]string{"env"}, env...)
	cmd = append(cmd, u.bin, "agent-upgrade", "--config", u.cfg, "--binary", "/root/dist/"+build, "--sha256", fileSHA256(t, buildPath(build)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	stdout, stderr, err := u.Run(ctx, append(cmd, args...)...)
	return stdout, stderr, exitCode(err), time.Since(start)
}

// agentSlot is the slot the running agent's process executes.
func (u *upHost) agentSlot(t *testing.T) string {
	t.Helper()
	pid := strings.TrimSpace(u.RunOK(t, "systemctl", "show", "-p", "MainPID", "--value", agentUnit))
	exe, _, err := u.Run(context.Background(), "readlink", "/proc/"+pid+"/exe")
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(strings.TrimSpace(exe), u.lib+"/")
}

// converge waits until the host is back in a steady state: no upgrade in
// flight, current and last-good naming the same slot, that slot an
// executable that runs, and the agent active on it.
func (u *upHost) converge(t *testing.T) upgradeStatus {
	t.Helper()
	deadline := time.Now().Add(convergeMax)
	var last string
	for {
		s := u.status(t)
		active, _, _ := u.Run(context.Background(), "systemctl", "is-active", agentUnit)
		slot := u.agentSlot(t)
		why := ""
		switch {
		case s.InFlight != nil:
			why = "upgrade to " + s.InFlight.ToVersion + " still in flight"
		case s.Current.Error != "" || s.LastGood.Error != "":
			why = fmt.Sprintf("link errors: current %q last-good %q", s.Current.Error, s.LastGood.Error)
		case s.Current.Slot != s.LastGood.Slot:
			why = fmt.Sprintf("current %s != last-good %s", s.Current.Slot, s.LastGood.Slot)
		case s.CurrentVersion == "":
			why = "current slot does not run"
		case strings.TrimSpace(active) != "active":
			why = "agent " + strings.TrimSpace(active)
		case slot != s.Current.Slot:
			why = fmt.Sprintf("agent runs %q, current is %s", slot, s.Current.Slot)
		}
		if why == "" {
			return s
		}
		if why != last {
			t.Logf("converging: %s", why)
			last = why
		}
		if time.Now().After(deadline) {
			u.dumpUpgrade(t)
			t.Fatalf("not converged after %v: %s", convergeMax, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (u *upHost) dumpUpgrade(t *testing.T) {
	t.Helper()
	out, _, _ := u.Run(context.Background(), u.bin, "status", "--config", u.cfg)
	t.Logf("status:\n%s", out)
	j, _, _ := u.Run(context.Background(), "journalctl", "--no-pager", "-n", "150", "-u", agentUnit, "-u", "aks-flex-node-recovery.service", "-u", "aks-flex-node-recovery.timer")
	t.Logf("journal:\n%s", j)
}

// otherFP is the failpoints build that is not current, for the crash tests
// (which alternate between the two with --allow-downgrade).
func (u *upHost) otherFP(t *testing.T) string {
	if u.status(t).CurrentVersion == builds["fp2"].version {
		return "fp1"
	}
	return "fp2"
}

func (u *upHost) setAgentFailpoint(t *testing.T, spec, dir string) {
	t.Helper()
	must(t, u.WriteFile(dropInPath, []byte("[Service]\nEnvironment="+failpoint.EnvPoints+"="+spec+" "+failpoint.EnvDir+"="+dir+"\n"), 0o644))
	u.RunOK(t, "systemctl", "daemon-reload")
}

func (u *upHost) clearAgentFailpoint(t *testing.T) {
	t.Helper()
	u.RunOK(t, "rm", "-rf", dropInDir)
	u.RunOK(t, "systemctl", "daemon-reload")
}

// checkLastGood: after an upgrade from slot from to build cand was cut
// short, last-good names the new slot only if the new agent confirmed it
// (a result "upgraded" to cand, by the agent or completed by recovery);
// otherwise it is still from, and so is current.
func (u *upHost) checkLastGood(t *testing.T, s upgradeStatus, from, cand string) {
	t.Helper()
	if s.Last != nil && s.Last.Result == "upgraded" && s.Last.ToVersion == builds[cand].version {
		if s.LastGood.Slot == from {
			t.Errorf("result says upgraded to %s, but last-good is still %s: %+v", cand, from, s.Last)
		}
		return
	}
	if s.LastGood.Slot != from || s.Current.Slot != from {
		u.dumpUpgrade(t)
		t.Errorf("no confirmed upgrade to %s (last %+v), yet current %s / last-good %s moved from %s", cand, s.Last, s.Current.Slot, s.LastGood.Slot, from)
	}
}

// scenarios runs good, preflight, downgrade, bad and hanging upgrades on
// one host, in that order; each leaves the host converged for the next.
func scenarios(t *testing.T, u *upHost) {
	if s := u.status(t); s.CurrentVersion != "v1.0.0-test" || s.Current.Slot != "agent-blue" || s.LastGood.Slot != "agent-blue" {
		t.Fatalf("after install: %+v", s)
	}

	out, errOut, code, took := u.upgradeTo(t, nil, "v2", "--deadline", "30s")
	if code != 0 || !strings.Contains(out, "upgraded") {
		u.dumpUpgrade(t)
		t.Fatalf("good upgrade: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("good upgrade v1 -> v2 took %v: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	s := u.converge(t)
	if s.CurrentVersion != "v2.0.0" || s.Current.Slot != "agent-green" || s.LastGood.Slot != "agent-green" ||
		s.Last == nil || s.Last.Result != "upgraded" || s.Last.By != "agent" || s.Last.ToVersion != "v2.0.0" {
		t.Errorf("status after good upgrade: %+v last %+v", s, s.Last)
	}
	// The CLI on PATH and the daemon run the same binary.
	if v := u.RunOK(t, u.bin, "version"); !strings.Contains(v, "v2.0.0") {
		t.Errorf("%s version after upgrade: %s", u.bin, v)
	}

	out = u.RunOK(t, u.bin, "agent-upgrade", "--config", u.cfg, "--preflight", "--binary", "/root/dist/v3exit", "--sha256", fileSHA256(t, buildPath("v3exit")))
	if !strings.Contains(out, "would install") || !strings.Contains(out, "v2.0.0 (agent-green) -> v3.0.0-exit (agent-blue)") {
		t.Errorf("preflight: %s", out)
	}
	if s := u.status(t); s.CurrentVersion != "v2.0.0" || s.InFlight != nil || s.Slots[0].Version != "v1.0.0-test" {
		t.Errorf("preflight changed something: %+v", s)
	}

	_, errOut, code, _ = u.upgradeTo(t, nil, "v1")
	if code != 2 || !strings.Contains(errOut, "--allow-downgrade") {
		t.Errorf("downgrade: exit %d: %s", code, errOut)
	}

	out, errOut, code, took = u.upgradeTo(t, nil, "v3exit", "--deadline", "60s")
	if code != 1 || !strings.Contains(out, "rolled-back") {
		u.dumpUpgrade(t)
		t.Fatalf("bad upgrade: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("bad upgrade (agent exits 1) rolled back after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	s = u.converge(t)
	if s.CurrentVersion != "v2.0.0" || s.Current.Slot != "agent-green" || s.Last == nil || s.Last.Result != "rolled-back" ||
		s.Last.ToVersion != "v3.0.0-exit" || !strings.Contains(s.Last.Reason, "exit-code") || s.Last.By != "recovery" {
		t.Errorf("status after bad upgrade: %+v last %+v", s, s.Last)
	}
	text := u.RunOK(t, u.bin, "status", "--config", u.cfg)
	if !strings.Contains(text, "last:       rolled-back v2.0.0 -> v3.0.0-exit") {
		t.Errorf("status text does not show the rollback:\n%s", text)
	}

	out, errOut, code, took = u.upgradeTo(t, nil, "v3hang", "--deadline", "8s")
	if code != 1 || !strings.Contains(out, "rolled-back") {
		u.dumpUpgrade(t)
		t.Fatalf("hanging upgrade: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("hanging upgrade rolled back after %v (deadline 8s)", took.Round(time.Millisecond))
	if took < 8*time.Second {
		t.Errorf("hanging upgrade rolled back before its deadline (%v)", took)
	}
	s = u.converge(t)
	if s.CurrentVersion != "v2.0.0" || s.Last == nil || s.Last.Result != "rolled-back" || !strings.Contains(s.Last.Reason, "did not confirm within the deadline") {
		t.Errorf("status after hanging upgrade: %+v last %+v", s, s.Last)
	}
}

func TestUpgradeACLWithPrefix(t *testing.T) {
	t.Parallel()
	u := newUpgradeHost(t, aclhost.ACL, aclPrefix, "v1", "upg")
	exec := u.RunOK(t, "systemctl", "show", "-p", "ExecStart", "--value", agentUnit)
	if !strings.Contains(exec, "path="+aclPrefix+"/lib/current ") {
		t.Errorf("ExecStart does not run the current slot under the prefix: %s", exec)
	}
	for _, unit := range []string{"/etc/systemd/system/aks-flex-node-recovery.service", "/etc/systemd/system/aks-flex-node-recovery.timer"} {
		u.RunOK(t, "systemd-analyze", "verify", unit)
	}
	scenarios(t, u)

	// Links a crash or a race left inconsistent, with nothing in flight:
	// the recovery unit repairs them by pointing current back at
	// last-good, never by making current last-good: with nothing in
	// flight, current differing from last-good was never confirmed (here
	// last-good is pointed by hand at agent-blue, which still holds an
	// agent that runs).
	u.RunOK(t, "ln", "-sfn", "agent-blue", aclPrefix+"/lib/last-good")
	u.RunOK(t, "systemctl", "start", "aks-flex-node-recovery.service")
	if s := u.converge(t); s.LastGood.Slot != "agent-blue" || s.Current.Slot != "agent-blue" {
		t.Errorf("recovery did not point current back at last-good: %+v", s)
	}
	u.RunOK(t, "ln", "-sfn", "agent-nonexistent", aclPrefix+"/lib/current")
	u.RunOK(t, "systemctl", "start", "aks-flex-node-recovery.service")
	if s := u.converge(t); s.Current.Slot != "agent-blue" {
		t.Errorf("recovery did not repair a broken current: %+v", s)
	}
	assertNothingUnderUsr(t, u.Host)
}

// TestUpgradeDebianDefaultLayout is the host installed the classic way
// (no agent.hostPrefix, files under /usr/local): it upgrades the same way,
// and a config that cannot be read falls back to the default layout, and
// says so.
func TestUpgradeDebianDefaultLayout(t *testing.T) {
	t.Parallel()
	u := newUpgradeHost(t, aclhost.Debian, "", "v1", "upgdeb")
	scenarios(t, u)
	_, errOut, err := u.Run(context.Background(), u.bin, "status", "--config", "/etc/aks-flex-node/absent.json")
	if err != nil || !strings.Contains(errOut, "config absent; using the default layout") {
		t.Errorf("status with an absent config: %v\n%s", err, errOut)
	}
	// Root reads any file whatever its mode; a directory in the config's
	// place is unreadable for real.
	u.RunOK(t, "mv", u.cfg, u.cfg+".bak")
	u.RunOK(t, "mkdir", u.cfg)
	out, errOut, err := u.Run(context.Background(), u.bin, "status", "--config", u.cfg)
	if err != nil || !strings.Contains(errOut, "config unreadable; using the default layout") || !strings.Contains(out, "/usr/local/bin/aks-flex-node (version v2.0.0)") {
		t.Errorf("status with an unreadable config: %v\n%s\n%s", err, out, errOut)
	}
	u.RunOK(t, "rmdir", u.cfg)
	u.RunOK(t, "mv", u.cfg+".bak", u.cfg)
}

// TestUpgradeLatencyBench measures, over 5 runs each, the rollback latency
// (the bad agent's first failed start to the last-good agent running
// again, from the host's journal) and the good-upgrade latency (agent-upgrade
// invoked to the new agent confirmed). Gated: make bench-upgrade.
func TestUpgradeLatencyBench(t *testing.T) {
	if os.Getenv("AKS_FLEX_NODE_BENCH") != "1" {
		t.Skip("set AKS_FLEX_NODE_BENCH=1 (make bench-upgrade)")
	}
	u := newUpgradeHost(t, aclhost.ACL, aclPrefix, "v1", "bench")
	var ups, rollbacks []time.Duration
	for i := 0; i < 5; i++ {
		target, args := "v2", []string{"--deadline", "60s"}
		if i%2 == 1 {
			target, args = "v1", []string{"--deadline", "60s", "--allow-downgrade"}
		}
		out, errOut, code, took := u.upgradeTo(t, nil, target, args...)
		if code != 0 {
			u.dumpUpgrade(t)
			t.Fatalf("good upgrade %d: exit %d\n%s\n%s", i, code, out, errOut)
		}
		ups = append(ups, took)
		u.converge(t)
	}
	for i := 0; i < 5; i++ {
		cursor := u.journalCursor(t)
		out, errOut, code, _ := u.upgradeTo(t, nil, "v3exit", "--deadline", "60s")
		if code != 1 || !strings.Contains(out, "rolled-back") {
			u.dumpUpgrade(t)
			t.Fatalf("bad upgrade %d: exit %d\n%s\n%s", i, code, out, errOut)
		}
		u.converge(t)
		rollbacks = append(rollbacks, u.rollbackLatency(t, cursor))
	}
	t.Logf("BENCH upgrade latency (agent-upgrade start to confirmed): median %v, runs %v", median(ups), ups)
	t.Logf("BENCH rollback latency (bad agent's failed start to last-good agent started): median %v, runs %v (target < 15s)", median(rollbacks), rollbacks)
	if m := median(rollbacks); m >= 15*time.Second {
		t.Errorf("rollback median %v misses the 15s target", m)
	}
}

// journalCursor is the cursor of the host journal's newest entry.
func (u *upHost) journalCursor(t *testing.T) string {
	t.Helper()
	var e struct {
		Cursor string `json:"__CURSOR"`
	}
	out := u.RunOK(t, "journalctl", "--no-pager", "-o", "json", "-n", "1")
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil || e.Cursor == "" {
		t.Fatalf("journal cursor: %v\n%s", err, out)
	}
	return e.Cursor
}

// rollbackLatency reads the agent unit's journal after a cursor: from the
// bad agent's failpoint line (printed as it exits 1) to the next "agent
// started" line (the last-good agent up again).
func (u *upHost) rollbackLatency(t *testing.T, cursor string) time.Duration {
	t.Helper()
	out := u.RunOK(t, "journalctl", "--no-pager", "-o", "json", "-u", agentUnit, "--after-cursor", cursor)
	var failed, started int64
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Message  any    `json:"MESSAGE"`
			Realtime string `json:"__REALTIME_TIMESTAMP"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		msg, _ := e.Message.(string)
		ts, _ := strconv.ParseInt(e.Realtime, 10, 64)
		switch {
		case failed == 0 && strings.Contains(msg, "failpoint "+agentupgrade.StepAgentStart+": exit1"):
			failed = ts
		case failed != 0 && strings.Contains(msg, "agent started"):
			started = ts
		}
		if started != 0 {
			break
		}
	}
	if failed == 0 || started == 0 {
		t.Fatalf("journal lacks the failed start (%d) or the restart (%d):\n%s", failed, started, out)
	}
	return time.Duration(started-failed) * time.Microsecond
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}

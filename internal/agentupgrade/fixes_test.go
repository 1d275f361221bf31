package agentupgrade

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// scriptHost is the recovery script rendered for a temp dir, with a fake
// systemctl first on PATH that logs its calls and answers from env vars:
// the script's decisions are tested here, and under real systemd in
// test/integration.
type scriptHost struct {
	t                   *testing.T
	dir, lib, state     string
	script, callLog     string
	path                string
	curLink, lastGood   string
	blue, green         string
	inFlight, failedRec string
}

const fakeSystemctl = `#!/bin/sh
echo "$*" >>"$FAKE_LOG"
case "$1" in
is-failed) [ "${FAKE_FAILED:-0}" = 1 ] ;;
is-active) [ "${FAKE_ACTIVE:-1}" = 1 ] ;;
show) echo "${FAKE_STARTED:-0}" ;;
*) exit 0 ;;
esac
`

func newScriptHost(t *testing.T) *scriptHost {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock (util-linux) not installed")
	}
	d := t.TempDir()
	h := &scriptHost{t: t, dir: d, lib: d + "/lib", state: d + "/state", script: d + "/recovery.sh", callLog: d + "/systemctl.log"}
	h.curLink, h.lastGood = h.lib+"/current", h.lib+"/last-good"
	h.blue, h.green = "agent-blue", "agent-green"
	h.inFlight, h.failedRec = h.state+"/"+InFlightFile, h.state+"/"+FailedFile
	script, err := genfile.Render(genfile.RecoveryScript, scriptVars{
		LibDir: h.lib, StateDir: h.state, Current: h.curLink, LastGood: h.lastGood, Blue: h.blue, Green: h.green,
		AgentUnit: layout.AgentUnitName, RecoveryUnit: layout.RecoveryUnit, TimerUnit: layout.RecoveryTimer,
		InFlightFile: InFlightFile, ResultFile: ResultFile, FailedFile: FailedFile,
		LinksLockFile: LinksLockFile, BootIDFile: bootIDFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	put(t, h.script, script)
	put(t, d+"/bin/systemctl", []byte(fakeSystemctl))
	put(t, h.lib+"/"+h.blue, fakeAgent("v1.0.0"))
	put(t, h.lib+"/"+h.green, fakeAgent("v2.0.0"))
	if err := os.MkdirAll(h.state, 0o755); err != nil {
		t.Fatal(err)
	}
	h.path = d + "/bin:" + os.Getenv("PATH")
	return h
}

func (h *scriptHost) link(link, slot string) {
	h.t.Helper()
	os.Remove(link)
	if err := os.Symlink(slot, link); err != nil {
		h.t.Fatal(err)
	}
}

func (h *scriptHost) cmd(mode string, env ...string) *exec.Cmd {
	c := exec.Command("bash", h.script, mode)
	c.Env = append([]string{"PATH=" + h.path, "FAKE_LOG=" + h.callLog}, env...)
	return c
}

func (h *scriptHost) run(mode string, env ...string) string {
	h.t.Helper()
	out, err := h.cmd(mode, env...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("recovery.sh %s: %v\n%s", mode, err, out)
	}
	return string(out)
}

func (h *scriptHost) calls() string {
	b, _ := os.ReadFile(h.callLog)
	return string(b)
}

func bootID(t *testing.T) string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		t.Skipf("no boot id: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// Nothing in flight and current ahead of last-good (a power cut that kept
// the switch and lost the record, a reset mid-upgrade, ...): current goes
// back to last-good even though the agent is not failed (it may sit in
// auto-restart); the unconfirmed slot never becomes last-good.
func TestScriptNeverPromotesAnUnconfirmedSlot(t *testing.T) {
	h := newScriptHost(t)
	h.link(h.curLink, h.green)
	h.link(h.lastGood, h.blue)
	out := h.run("recover", "FAKE_FAILED=0")
	if c, _ := os.Readlink(h.curLink); c != h.blue {
		t.Errorf("current -> %s, want last-good's %s\n%s", c, h.blue, out)
	}
	if g, _ := os.Readlink(h.lastGood); g != h.blue {
		t.Errorf("last-good -> %s: an unconfirmed slot was promoted\n%s", g, out)
	}
	if !strings.Contains(h.calls(), "restart "+layout.AgentUnitName) {
		t.Errorf("agent not restarted on last-good; systemctl calls:\n%s", h.calls())
	}
}

// A recovery run waits for the links lock that a confirming agent holds.
func TestScriptWaitsForTheLinksLock(t *testing.T) {
	h := newScriptHost(t)
	h.link(h.curLink, h.green)
	h.link(h.lastGood, h.blue)
	unlock, err := lockLinksAt(filepath.Join(h.state, LinksLockFile), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := h.cmd("recover")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if cur, _ := os.Readlink(h.curLink); cur != h.green {
		t.Errorf("the script moved current while another process held the links lock")
	}
	unlock()
	if err := c.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if cur, _ := os.Readlink(h.curLink); cur != h.blue {
		t.Errorf("after the lock was released: current -> %s\n%s", cur, out.String())
	}
}

// The old agent, stopped by agent-upgrade's restart after the record was
// written, may fail its stop; only a process started after the switch is
// the new agent whose failure triggers a rollback.
func TestScriptAgentStoppedBlamesOnlyTheNewAgent(t *testing.T) {
	h := newScriptHost(t)
	h.link(h.curLink, h.green)
	h.link(h.lastGood, h.blue)
	rec := "from_slot=agent-blue\nto_slot=agent-green\nto_version=v2.0.0\ndeadline=4102444800\nswitch_mono=1000\nboot_id=" + bootID(t) + "\n"
	put(t, h.inFlight, []byte(rec))

	h.run("agent-stopped", "SERVICE_RESULT=timeout", "FAKE_STARTED=500")
	if _, err := os.Stat(h.failedRec); err == nil || strings.Contains(h.calls(), "start --no-block "+layout.RecoveryUnit) {
		t.Errorf("the old agent's failed stop was blamed on the new agent; calls:\n%s", h.calls())
	}
	// recover mode too: a failed unit whose process predates the switch.
	h.run("recover", "FAKE_FAILED=1", "FAKE_STARTED=500")
	if cur, _ := os.Readlink(h.curLink); cur != h.green {
		t.Errorf("rolled back for the old agent's failure")
	}

	h.run("agent-stopped", "SERVICE_RESULT=exit-code", "EXIT_CODE=exited", "EXIT_STATUS=1", "FAKE_STARTED=2000")
	if b, err := os.ReadFile(h.failedRec); err != nil || !strings.Contains(string(b), "exit-code") {
		t.Errorf("the new agent's failure was not recorded: %q %v", b, err)
	}
	if !strings.Contains(h.calls(), "start --no-block "+layout.RecoveryUnit) {
		t.Errorf("recovery not started for the new agent's failure; calls:\n%s", h.calls())
	}
	h.run("recover", "FAKE_STARTED=2000")
	if cur, _ := os.Readlink(h.curLink); cur != h.blue {
		t.Errorf("not rolled back after the new agent failed: current -> %s", cur)
	}
	if res, _ := os.ReadFile(h.state + "/" + ResultFile); !strings.Contains(string(res), "result=rolled-back") {
		t.Errorf("result: %s", res)
	}

	// After a reboot every agent process ran after the switch.
	h.link(h.curLink, h.green)
	put(t, h.inFlight, []byte(strings.Replace(rec, "boot_id=", "boot_id=x", 1)))
	h.run("agent-stopped", "SERVICE_RESULT=exit-code", "FAKE_STARTED=1")
	if _, err := os.Stat(h.failedRec); err != nil {
		t.Errorf("a failure after a reboot was not recorded: %v", err)
	}
}

// read_kv on a record removed under it (a confirmation) yields nothing
// instead of aborting the script under set -e.
func TestScriptReadKVMissingFile(t *testing.T) {
	h := newScriptHost(t)
	out, err := exec.Command("bash", "-c", `set -euo pipefail
eval "$(sed -n '/^read_kv()/,/^}/p' "$1")"
v=$(read_kv "$2" deadline)
echo "ok[$v]"`, "x", h.script, h.dir+"/absent").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok[]" {
		t.Errorf("read_kv on a missing file: %v: %s", err, out)
	}
}

// agent-upgrade switches current only while its own record is there:
// recovery may have resolved (aborted) the upgrade in the meantime.
func TestSwitchRechecksTheRecord(t *testing.T) {
	l := seeded(t, "v1.0.0")
	put(t, slotPath(l, "agent-green"), fakeAgent("v2.0.0"))
	rec := InFlight{FromSlot: "agent-blue", ToSlot: "agent-green", ToVersion: "v2.0.0", Deadline: time.Now().Add(time.Minute), SwitchMono: 42}
	if err := switchCurrent(l, rec); err == nil || !strings.Contains(err.Error(), "nothing was switched") {
		t.Errorf("switch without a record: %v", err)
	}
	if err := saveResult(l, Result{Result: ResultAborted, Reason: "the old agent failed"}); err != nil {
		t.Fatal(err)
	}
	if err := switchCurrent(l, rec); err == nil || !strings.Contains(err.Error(), "aborted: the old agent failed") {
		t.Errorf("switch after recovery aborted: %v", err)
	}
	if c, _ := linkSlot(l, l.UpgradeSlots().Current); c != "agent-blue" {
		t.Fatalf("current moved to %s with no record", c)
	}
	if err := saveInFlight(l, rec); err != nil {
		t.Fatal(err)
	}
	if err := switchCurrent(l, rec); err != nil {
		t.Fatal(err)
	}
	if c, _ := linkSlot(l, l.UpgradeSlots().Current); c != "agent-green" {
		t.Errorf("current -> %s after a switch", c)
	}
}

// Confirm decides under the links lock: while recovery holds it, Confirm
// waits, and a deadline that passes meanwhile makes it give up.
func TestConfirmWaitsForTheLinksLock(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := seeded(t, "v1.0.0")
	put(t, slotPath(l, "agent-green"), fakeAgent(buildinfo.Version))
	rec := InFlight{FromSlot: "agent-blue", ToSlot: "agent-green", ToVersion: buildinfo.Version, Deadline: time.Now().Add(time.Second)}
	if err := saveInFlight(l, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := pointLink(l, l.UpgradeSlots().Current, "agent-green"); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockLinks(l, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := Confirm(l, "agent-green", log); ok || err == nil {
		t.Errorf("confirmed while recovery held the lock past the deadline: %v %v", ok, err)
	}
	if g, _ := linkSlot(l, l.UpgradeSlots().LastGood); g != "agent-blue" {
		t.Errorf("last-good moved to %s", g)
	}

	rec.Deadline = time.Now().Add(time.Minute)
	if err := saveInFlight(l, rec); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); unlock() }()
	if ok, err := Confirm(l, "agent-green", log); !ok || err != nil {
		t.Fatalf("confirm after the lock was released: %v %v", ok, err)
	}
	if g, _ := linkSlot(l, l.UpgradeSlots().LastGood); g != "agent-green" {
		t.Errorf("last-good -> %s after confirmation", g)
	}

	// Recovery resolved the upgrade while Confirm waited: nothing moves.
	rec2 := InFlight{FromSlot: "agent-green", ToSlot: "agent-blue", ToVersion: buildinfo.Version, Deadline: time.Now().Add(time.Minute)}
	if err := saveInFlight(l, rec2); err != nil {
		t.Fatal(err)
	}
	unlock2, err := lockLinks(l, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); _ = clearInFlight(l); unlock2() }()
	if ok, err := Confirm(l, "agent-blue", log); ok || err == nil || !strings.Contains(err.Error(), "recovery resolved") {
		t.Errorf("confirm after recovery resolved: %v %v", ok, err)
	}
	if g, _ := linkSlot(l, l.UpgradeSlots().LastGood); g != "agent-green" {
		t.Errorf("last-good moved to %s", g)
	}
}

func TestCleanStaleKeepsFreshLinkTemps(t *testing.T) {
	l := testLayout(t)
	lib := l.OnRoot(l.LibDir())
	fresh, old, cand := lib+"/.current.tmp-12", lib+"/.last-good.tmp-7", lib+"/.candidate-x"
	slotTmp := lib + "/.agent-green4242" // a killed WriteStreamAtomic
	for _, p := range []string{fresh, old} {
		if err := os.MkdirAll(lib, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("agent-blue", p); err != nil {
			t.Fatal(err)
		}
	}
	put(t, cand, nil)
	put(t, slotTmp, nil)
	past := time.Now().Add(-2 * staleAge)
	for _, p := range []string{old, slotTmp} {
		if err := lutimes(p, past); err != nil {
			t.Fatal(err)
		}
	}
	cleanStale(l)
	if _, err := os.Lstat(fresh); err != nil {
		t.Errorf("a fresh link temp file (another process between ln and mv) was removed")
	}
	for _, p := range []string{old, cand, slotTmp} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not cleaned: %v", p, err)
		}
	}
}

// Uninstall and reset point current back at last-good when an upgrade was
// cut short: the binary reset keeps is the confirmed one.
func TestSettleLinksRollsBackUnconfirmed(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := seeded(t, "v1.0.0")
	if changed, err := settleLinks(l, log); changed || err != nil {
		t.Errorf("settled links that agreed: %v %v", changed, err)
	}
	if _, err := os.Lstat(statePath(l, LinksLockFile)); err == nil {
		os.Remove(statePath(l, LinksLockFile))
	}
	put(t, slotPath(l, "agent-green"), fakeAgent("v2.0.0"))
	if _, err := pointLink(l, l.UpgradeSlots().Current, "agent-green"); err != nil {
		t.Fatal(err)
	}
	if changed, err := settleLinks(l, log); !changed || err != nil {
		t.Fatalf("settle: %v %v", changed, err)
	}
	if c, _ := linkSlot(l, l.UpgradeSlots().Current); c != "agent-blue" {
		t.Errorf("current -> %s after settle", c)
	}
}

func TestDownloadSizeCapped(t *testing.T) {
	defer func(n int64) { maxCandidateSize = n }(maxCandidateSize)
	maxCandidateSize = 1 << 10
	big := bytes.Repeat([]byte("x"), 4<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // no Content-Length
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		}
		_, _ = w.Write(big)
	}))
	defer srv.Close()
	var re *RefusedError
	if _, _, err := openCandidate(context.Background(), "", srv.URL+"/sized"); !errors.As(err, &re) || !strings.Contains(err.Error(), "more than an agent binary") {
		t.Errorf("Content-Length over the cap: %v", err)
	}
	rc, _, err := openCandidate(context.Background(), "", srv.URL+"/chunked")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if n, err := io.Copy(io.Discard, rc); err == nil || n > maxCandidateSize+int64(len(big)) {
		t.Errorf("a stream over the cap read %d bytes, err %v", n, err)
	}
}

// start asks CheckSeed before it touches the host: install-agent-service
// runs after join, and must not fail there.
func TestCheckSeed(t *testing.T) {
	ctx := context.Background()
	l := testLayout(t)
	if err := CheckSeed(ctx, l); err == nil || !strings.Contains(err.Error(), "no agent binary at "+l.AgentBinary()) {
		t.Errorf("no binary: %v", err)
	}
	put(t, l.OnRoot(l.AgentBinary()), fakeAgent("v1.0.0"))
	if err := CheckSeed(ctx, l); err != nil {
		t.Errorf("first install: %v", err)
	}
	if _, err := Seed(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := CheckSeed(ctx, l); err != nil {
		t.Errorf("seeded: %v", err)
	}
	// A new binary at agentBinary while an upgrade is in flight: Seed
	// would refuse to adopt it, so start refuses up front.
	if err := saveInFlight(l, InFlight{ToSlot: "agent-green", ToVersion: "v2.0.0", Deadline: time.Now()}); err != nil {
		t.Fatal(err)
	}
	os.Remove(l.OnRoot(l.AgentBinary()))
	put(t, l.OnRoot(l.AgentBinary()), fakeAgent("v3.0.0"))
	err := CheckSeed(ctx, l)
	if err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("in flight: %v", err)
	}
	if _, serr := Seed(ctx, l); serr == nil {
		t.Errorf("CheckSeed refused but Seed succeeded")
	}
	if err := clearInFlight(l); err != nil {
		t.Fatal(err)
	}
	if err := CheckSeed(ctx, l); err != nil {
		t.Errorf("adoptable: %v", err)
	}
	if _, err := Seed(ctx, l); err != nil {
		t.Errorf("CheckSeed passed but Seed failed: %v", err)
	}
}

func lutimes(path string, t time.Time) error {
	return exec.Command("touch", "-h", "-d", t.Format(time.RFC3339), path).Run()
}

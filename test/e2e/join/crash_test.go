package join

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

// crashScenario is the host of the crash tests: the ACL-like host with a
// prefix, the bundle from the site registry, and an agent whose keeper
// looks every two seconds.
var crashScenario = scenario{name: "crash", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node",
	current: "/opt/aks-flex-node/lib/current", nodeName: "crash-node-1", oci: true}

// Crash kinds: a kill -9 of the command at a failpoint, and a power cut
// of the whole host while the command hangs at one.
const (
	kill9    = "kill -9"
	powerCut = "power cut"
)

// taskNames are the names of phases' tasks in order: the crash points,
// read from the code so a task added to start or reset is crashed at
// without anyone editing this test.
func taskNames(phases []task.Phase) []string {
	var out []string
	for _, p := range phases {
		out = append(out, p.Names()...)
	}
	return out
}

// crashHost is the one host all crash tests share.
type crashHost struct {
	*aclhost.Host
	e    *env
	sc   scenario
	snap *snapshotter
	// durations are how long each task of the first start took.
	durations map[string]time.Duration
	// pristine is the host before install.sh: what reset and
	// uninstall.sh must leave (the diff the reset test uses).
	pristine aclhost.Tree
}

// crash runs, on one host and the shared control plane: two starts 150 ms
// apart; a crash of start while the agent's machine keeper wants to act;
// then kill -9 and a power cut after every task of reset and of start, as
// chains in which each re-run both recovers from the last crash and is
// crashed at the next task. Each chain ends with a converging run and the
// checks: Ready (or clean, for reset), and every file old or new after
// every crash.
func (e *env) crash(t *testing.T) {
	fp := filepath.Join(e.dist, "aks-flex-node-fp")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "failpoints", "-o", fp,
		"-ldflags", "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=v1.0.0-e2e", "./cmd/aks-flex-node")
	cmd.Dir, cmd.Env = repoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the failpoints agent: %v\n%s", err, b)
	}
	h := &crashHost{e: e, sc: crashScenario, snap: newSnapshotter()}
	h.Host = e.bootCrashHost(t, fp)
	var err error
	if h.pristine, err = h.treeSnapshot(); err != nil {
		t.Fatal(err)
	}
	h.install(t)
	startTasks := taskNames(lifecycle.NewStart(lifecycle.Options{Config: &config.Config{}}).Phases("v1"))
	resetTasks := taskNames(lifecycle.ResetPhases(lifecycle.Options{}))
	figures := map[string]time.Duration{}
	timed := func(name string, f func()) {
		begin := time.Now()
		f()
		figures[name] = time.Since(begin)
	}
	ok := func() bool { return !t.Failed() }
	timed("concurrent starts", func() { h.concurrentStarts(t) })
	for _, kind := range []string{kill9, powerCut} {
		if ok() {
			timed("keeper races a start crashed by "+kind, func() { h.keeperRace(t, kind, startTasks[0]) })
		}
	}
	for _, kind := range []string{kill9, powerCut} {
		if ok() {
			timed(fmt.Sprintf("reset, %s after each of %d tasks", kind, len(resetTasks)), func() { h.resetChain(t, kind, resetTasks) })
		}
		if ok() {
			timed(fmt.Sprintf("start, %s after each of %d tasks", kind, len(startTasks)), func() { h.startChain(t, kind, startTasks) })
		}
	}
	// In the middle of a task only kill -9: a power cut here keeps the
	// page cache (see aclhost.PowerCycle), so what it adds over kill -9
	// mid-task is the machine and /run going away, which the power cuts
	// after each task already cover.
	if ok() {
		timed("start, "+kill9Mid, func() {
			h.resetClean(t, "before the "+kill9Mid+" chain")
			h.midTaskChain(t, kill9Mid, startTasks)
		})
	}
	if ok() {
		h.resetClean(t, "end")
	}
	for name, d := range figures {
		t.Logf("BENCH crash %s: %v", name, d.Round(100*time.Millisecond))
	}
}

// bootCrashHost boots the crash host with the failpoints agent at
// /root/dist/aks-flex-node and a config whose keeper looks every 2s.
func (e *env) bootCrashHost(t *testing.T, agent string) *aclhost.Host {
	h := aclhost.MustStart(t, aclhost.Options{Variant: crashScenario.variant, Name: crashScenario.name, NetNS: e.net.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
	}})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.CopyIn(agent, "/root/dist/aks-flex-node", 0o755))
	for _, s := range []string{"install.sh", "uninstall.sh"} {
		must(h.CopyIn(filepath.Join(repoRoot(), "scripts", s), "/root/dist/"+s, 0o755))
	}
	// A bootstrap token, as an admin makes one with cluster prepare: the
	// control plane grants no token anything itself.
	var cfg map[string]any
	must(json.Unmarshal(e.bootstrapTokenConfig(t, crashScenario), &cfg))
	cfg["agent"].(map[string]any)["machineReconcileInterval"] = "2s"
	data, err := json.MarshalIndent(cfg, "", "  ")
	must(err)
	must(h.WriteFile("/etc/aks-flex-node/config.json", data, 0o600))
	return h
}

func (h *crashHost) install(t *testing.T) {
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sha256File(t, filepath.Join(h.e.dist, "aks-flex-node-fp")))
}

// treeSnapshot is the reset test's snapshot, without the fixtures bound in.
func (h *crashHost) treeSnapshot() (aclhost.Tree, error) {
	return aclhost.SnapshotDir(h.Path("/"), append(append([]string{}, aclhost.DefaultExcludes...), "/var/lib/aks-flex-node-test", "/var/tmp/failpoints-*"),
		"/etc", "/var", "/opt", "/usr")
}

// crashSnap records the watched trees now, labelled step.
func (h *crashHost) crashSnap(t *testing.T, step string) crashSnap {
	t.Helper()
	tree, err := h.snap.take(h.Path("/"))
	if err != nil {
		t.Fatal(err)
	}
	tracker, _ := os.ReadFile(h.Path(trackerFile))
	return crashSnap{step: step, tree: tree, tracker: tracker}
}

// run runs the agent inside the host with env (NAME=value) set.
func (h *crashHost) run(ctx context.Context, env []string, args ...string) (string, string, error) {
	cmd := append(append([]string{"env"}, env...), h.sc.agent)
	return h.Run(ctx, append(cmd, args...)...)
}

// converge runs start until it succeeds, then checks the node is Ready and
// that a second start changes nothing.
func (h *crashHost) converge(t *testing.T, label string) {
	t.Helper()
	out, stderr, err := h.run(h.e.ctx, nil, "start", "--join-timeout", "2m")
	if err != nil {
		h.dumpMachine(t)
		t.Fatalf("%s: start: %v\n%s\n%s", label, err, out, stderr)
	}
	kubetest.WaitReady(h.e.ctx, t, h.e.cp.Client, h.sc.nodeName, 2*time.Minute)
	out, stderr, err = h.run(h.e.ctx, nil, "start", "--join-timeout", "2m")
	if err != nil || !strings.Contains(out, "nothing changed") {
		t.Fatalf("%s: a second start did not find the host converged: %v\n%s\n%s", label, err, out, stderr)
	}
}

func (h *crashHost) dumpMachine(t *testing.T) {
	t.Helper()
	for _, unit := range []string{"kubelet", "containerd"} {
		j, _, _ := h.Run(context.Background(), "journalctl", "-D", "/var/lib/machines/kube1/var/log/journal", "--no-pager", "-n", "60", "-u", unit)
		t.Logf("%s in kube1:\n%s", unit, j)
	}
	j, _, _ := h.Run(context.Background(), "journalctl", "--no-pager", "-n", "80", "-u", "aks-flex-node-agent.service")
	t.Logf("agent:\n%s", j)
}

// resetClean resets, checks reset and uninstall.sh leave the host as it
// was before install.sh (the reset test's diff), and installs again.
func (h *crashHost) resetClean(t *testing.T, label string) {
	t.Helper()
	if out, stderr, err := h.run(h.e.ctx, nil, "reset"); err != nil {
		t.Fatalf("%s: reset: %v\n%s\n%s", label, err, out, stderr)
	}
	h.RunOK(t, "/root/dist/uninstall.sh")
	after, err := h.treeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(h.pristine, after); len(d) > 0 {
		t.Errorf("%s: reset + uninstall left changes:\n%s", label, strings.Join(d, "\n"))
	}
	h.install(t)
}

// failpointEnv arms step with action, firing once: the marker dir keeps
// what fired across power cuts.
func failpointEnv(step, action, dir string) []string {
	return []string{failpoint.EnvPoints + "=" + step + ":" + action, failpoint.EnvDir + "=" + dir}
}

// crashAt runs the agent command (start or reset) crashed at step, by
// kind: kill -9 at the failpoint, or a hang there and a power cut.
func (h *crashHost) crashAt(t *testing.T, kind, command, step string) {
	t.Helper()
	dir := "/var/tmp/failpoints-" + strings.ReplaceAll(kind, " ", "") + "-" + command
	args := []string{command}
	if command == "start" {
		args = append(args, "--join-timeout", "2m")
	}
	if kind == kill9 {
		out, stderr, err := h.run(h.e.ctx, failpointEnv(step, "kill", dir), args...)
		if err == nil || !strings.Contains(stderr, "failpoint "+step+": kill") {
			t.Fatalf("%s was not killed at %s: %v\n%s\n%s", command, step, err, out, stderr)
		}
		return
	}
	ctx, cancel := context.WithCancel(h.e.ctx)
	cmd := h.Command(ctx, append(append(append([]string{"env"}, failpointEnv(step, "hang", dir)...), h.sc.agent), args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { cancel(); <-done }()
	if !h.waitFor(dir+"/"+step+".reached", done, 3*time.Minute) {
		t.Fatalf("%s never reached %s:\n%s", command, step, stderr.String())
	}
	if err := h.PowerCycle(h.e.ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits for a file inside the host to appear, giving up when the
// process behind it ended (done) or after max.
func (h *crashHost) waitFor(p string, done <-chan struct{}, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(h.Path(p)); err == nil {
			return true
		}
		select {
		case <-done:
			_, err := os.Stat(h.Path(p))
			return err == nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// startChain crashes start after each task in turn (each run recovering
// from the crash before), then converges and checks every crash left each
// file old or new and the state file with its sidecar.
func (h *crashHost) startChain(t *testing.T, kind string, tasks []string) {
	before := h.crashSnap(t, "before")
	var snaps []crashSnap
	for _, step := range tasks {
		begin := time.Now()
		h.crashAt(t, kind, "start", step)
		snaps = append(snaps, h.crashSnap(t, step))
		h.checkStateFile(t, kind, step)
		t.Logf("start, %s at %s: %v", kind, step, time.Since(begin).Round(10*time.Millisecond))
	}
	h.converge(t, "start after "+kind+" at every task")
	final := h.crashSnap(t, "converged")
	checkOldOrNew(t, "start, "+kind, before, final, snaps)
}

// resetChain: the same for reset, on a joined host, ending clean.
func (h *crashHost) resetChain(t *testing.T, kind string, tasks []string) {
	before := h.crashSnap(t, "before")
	var snaps []crashSnap
	for _, step := range tasks {
		begin := time.Now()
		h.crashAt(t, kind, "reset", step)
		snaps = append(snaps, h.crashSnap(t, step))
		h.checkStateFile(t, kind, step)
		t.Logf("reset, %s at %s: %v", kind, step, time.Since(begin).Round(10*time.Millisecond))
	}
	if _, stderr, err := h.run(h.e.ctx, nil, "reset"); err != nil {
		t.Fatalf("reset after %s at every task: %v\n%s", kind, err, stderr)
	}
	final := h.crashSnap(t, "reset")
	checkOldOrNew(t, "reset, "+kind, before, final, snaps)
	h.resetClean(t, "reset after "+kind+" at every task")
}

// checkStateFile: the applied-state file is absent, or whole and agreeing
// with its sidecar. save-state writes both, the sidecar second, so they
// agree at every task boundary; only a crash between the two writes (in
// the middle of save-state, which takes milliseconds and is not crashed
// mid-task here) leaves a mismatch, by design: the state store's Applied reports it and
// the next start rewrites both. checkOldOrNew checks the file is the old
// or the new one.
func (h *crashHost) checkStateFile(t *testing.T, kind, step string) {
	t.Helper()
	data, err := os.ReadFile(h.Path("/var/lib/aks-flex-node/state.json"))
	if err != nil {
		return
	}
	side, err := os.ReadFile(h.Path("/var/lib/aks-flex-node/state.json.sha256"))
	if err != nil || !strings.HasPrefix(string(side), sha256Hex(data)+"  ") {
		t.Errorf("%s at %s: state.json and its sidecar disagree (%v): %q", kind, step, err, side)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

package repave

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/failpoint"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/state"
)

// fpAgent is where the host has the agent built with -tags failpoints;
// the installed agent (the service, which recovers) is the product build.
const fpAgent = "/root/dist/aks-flex-node-fp"

// Crash kinds: kill -9 of `node upgrade` at a failpoint, and a power cut
// of the whole host while it hangs at one.
const (
	kill9    = "kill -9"
	powerCut = "power cut"
)

// saveState is the switch's commit point, by its failpoint name.
const saveState = "finish.save-state"

// repaveSteps are the crash points: every task of the repave's phases, in
// order, by phase-qualified failpoint name (task.Step), read from the
// code, so a task added to the repave is crashed at without anyone
// editing this test.
func repaveSteps() []string {
	var out []string
	for _, p := range newRepave().Phases("v2") {
		out = append(out, p.Steps()...)
	}
	return out
}

// rollbackSteps are the rollback phase's crash points: its tasks run in
// switch or finish too, so only their phase-qualified names reach them.
func rollbackSteps() []string { return newRepave().RollbackPhase().Steps() }

func newRepave() *lifecycle.Repave {
	return lifecycle.NewRepave(lifecycle.RepaveOptions{Options: lifecycle.Options{Config: &config.Config{}}}, state.Applied{Machine: "kube1"})
}

// committed says whether a crash after step leaves the switch committed:
// save-state wrote the applied state naming the new side.
func committed(steps []string, step string) bool {
	return slices.Index(steps, step) >= slices.Index(steps, saveState)
}

// crashMatrix: kill -9 and a power cut after every repave task, as two
// chains on the one host; after each crash the agent (the installed one,
// at its start after a power cut) recovers, and the node must end Ready
// on exactly one side, the old one before save-state and the new one
// from it, not cordoned, the same Node, with status saying so; then the
// next repave of the chain runs from there and is crashed at the next
// task. A last repave then runs through.
func (e *env) crashMatrix(t *testing.T) {
	steps := repaveSteps()
	if len(steps) < 10 || !slices.Contains(steps, saveState) || !slices.Contains(steps, "switch.stop-active-machine") {
		t.Fatalf("the repave's task list looks wrong: %q", steps)
	}
	uid := e.node(t).UID
	began := time.Now()
	for _, kind := range []string{kill9, powerCut} {
		chain := time.Now()
		for _, step := range steps {
			if t.Failed() {
				return
			}
			from := e.status(t).Active
			want := from
			if committed(steps, step) {
				want = otherSide(from)
			}
			at := time.Now()
			e.crashAt(t, kind, step, version, "--drain-timeout", "1m", "--ready-timeout", "1m")
			e.checkRecovered(t, kind+" at "+step, want, uid, at, version)
			t.Logf("repave, %s at %s: back on %s in %v", kind, step, want, time.Since(at).Round(10*time.Millisecond))
		}
		t.Logf("BENCH repave crash chain %s, %d points: %v", kind, len(steps), time.Since(chain).Round(100*time.Millisecond))
	}
	r, _, err := e.nodeUpgrade(t, "--kubernetes-version", version, "--drain-timeout", "2m", "--ready-timeout", "2m")
	if err != nil || r.Result != "succeeded" {
		t.Fatalf("a repave after the crash matrix: %v, record %+v", err, r)
	}
	e.checkRecovered(t, "the repave after the crash matrix", r.ToMachine, uid, time.Time{}, version)
	t.Logf("BENCH repave crash matrix: %d points in %v", 2*len(steps), time.Since(began).Round(100*time.Millisecond))
}

// rollbackCrashMatrix: kill -9 and a power cut after every task of the
// rollback phase. Each run is a repave to the bundle whose kubelet exits
// at start: its switch fails once the ready timeout passes, the rollback
// begins and is crashed at the point; the old side must end Ready as
// crashMatrix checks, at the version it ran before. One run a point: the
// repave's own phases before it are what crashMatrix covers.
func (e *env) rollbackCrashMatrix(t *testing.T) {
	steps := rollbackSteps()
	if len(steps) < 4 || steps[0] != "rollback.stop-new-machine" || slices.Contains(repaveSteps(), steps[1]) {
		t.Fatalf("the rollback phase's crash points look wrong: %q", steps)
	}
	n := e.node(t)
	uid, kubelet := n.UID, strings.TrimPrefix(n.Status.NodeInfo.KubeletVersion, "v")
	began := time.Now()
	for _, kind := range []string{kill9, powerCut} {
		for _, step := range steps {
			if t.Failed() {
				return
			}
			from := e.status(t).Active
			at := time.Now()
			e.crashAt(t, kind, step, failing, "--drain-timeout", "1m", "--ready-timeout", "30s")
			e.checkRecovered(t, kind+" at "+step, from, uid, at, kubelet)
			t.Logf("repave rolling back, %s at %s: back on %s in %v", kind, step, from, time.Since(at).Round(10*time.Millisecond))
		}
	}
	t.Logf("BENCH repave rollback crash matrix: %d points in %v", 2*len(steps), time.Since(began).Round(100*time.Millisecond))
}

func otherSide(m string) string {
	if m == "kube1" {
		return "kube2"
	}
	return "kube1"
}

// crashAt runs `node upgrade` to version (with flags) with the failpoints
// agent, crashed at step by kind: killed there, or hanging there while
// the host loses power (and boots again).
func (e *env) crashAt(t *testing.T, kind, step, version string, flags ...string) {
	t.Helper()
	dir := "/var/tmp/failpoints-repave-" + strings.ReplaceAll(kind, " ", "")
	action := map[string]string{kill9: "kill", powerCut: "hang"}[kind]
	args := append([]string{"env", failpoint.EnvPoints + "=" + step + ":" + action, failpoint.EnvDir + "=" + dir,
		fpAgent, "node", "upgrade", "--kubernetes-version", version}, flags...)
	if kind == kill9 {
		out, stderr, err := e.h.Run(e.ctx, args...)
		if err == nil || !strings.Contains(stderr, "failpoint "+step+": kill") {
			t.Fatalf("node upgrade was not killed at %s: %v\n%s\n%s", step, err, out, stderr)
		}
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cmd := e.h.Command(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { cancel(); <-done }()
	if !e.waitFile(dir+"/"+step+".reached", done, 3*time.Minute) {
		t.Fatalf("node upgrade never reached %s:\n%s", step, stderr.String())
	}
	if err := e.h.PowerCycle(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFile waits for a file inside the host, giving up when the process
// that would write it ended (done) or after max.
func (e *env) waitFile(p string, done <-chan struct{}, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(e.h.Path(p)); err == nil {
			return true
		}
		select {
		case <-done:
			_, err := os.Stat(e.h.Path(p))
			return err == nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// checkRecovered waits (bounded) for the node to be back after a crash:
// no repave in flight and the last one closed (as interrupted, for a
// crash at since), exactly the machine want running, which status names
// active, the Node (same UID) Ready with a kubelet that renewed its Lease
// after since, at kubelet's version, not cordoned. Every look at the
// machines on the way must see at most one running.
func (e *env) checkRecovered(t *testing.T, label, want string, uid any, since time.Time, kubelet string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for {
		running := e.runningMachines()
		if len(running) > 1 {
			t.Fatalf("%s: machines %q running at once", label, running)
		}
		problem := e.recoveredProblem(t, want, uid, since, running, kubelet)
		if problem == "" {
			return
		}
		if problem != last {
			t.Logf("%s: waiting: %s", label, problem)
			last = problem
		}
		if time.Now().After(deadline) {
			out, _, _ := e.h.Run(e.ctx, agent, "status")
			j, _, _ := e.h.Run(e.ctx, "journalctl", "--no-pager", "-n", "60", "-u", "aks-flex-node-agent")
			t.Fatalf("%s: not recovered after 3m: %s\nstatus:\n%s\nagent:\n%s", label, problem, out, j)
		}
		time.Sleep(500 * time.Millisecond) // poll interval of a bounded wait
	}
}

// recoveredProblem is what is not yet as checkRecovered wants ("" once
// everything is).
func (e *env) recoveredProblem(t *testing.T, want string, uid any, since time.Time, running []string, kubelet string) string {
	s, err := e.statusOf()
	switch {
	case err != nil:
		return "status: " + err.Error()
	case s.InFlight != nil:
		return "a repave still in flight at " + s.InFlight.Step
	case !since.IsZero() && (s.Last == nil || s.Last.Started.Before(since.Add(-time.Second)) || s.Last.Result != state.RepaveInterrupted):
		return fmt.Sprintf("the last repave is not this one, closed as interrupted: %+v", s.Last)
	case s.Active != want:
		return "status says " + s.Active + " is active, want " + want
	case !slices.Equal(running, []string{want}):
		return fmt.Sprintf("machines running %q, want only %s", running, want)
	}
	n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "Node: " + err.Error()
	}
	if fmt.Sprint(n.UID) != fmt.Sprint(uid) {
		t.Fatalf("the Node is another object: UID %s, was %v", n.UID, uid)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	switch {
	case !ready:
		return "Node not Ready"
	case n.Spec.Unschedulable:
		return "Node cordoned"
	case n.Status.NodeInfo.KubeletVersion != "v"+kubelet:
		return "kubelet " + n.Status.NodeInfo.KubeletVersion
	}
	l, err := e.cp.Client.CoordinationV1().Leases("kube-node-lease").Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since) {
		return fmt.Sprintf("no Lease renewed since the crash (%v)", err)
	}
	return ""
}

// runningMachines are the machines machinectl lists in the host.
func (e *env) runningMachines() []string {
	out, _, err := e.h.Run(e.ctx, "machinectl", "list", "--no-legend")
	if err != nil {
		return nil // machined not up yet after a power cut: nothing runs then
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names
}

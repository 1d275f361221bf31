package join

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// concurrentStarts: two starts 150 ms apart on a host that never joined.
// One waits for the node lock and says the other holds it (start, its
// pid); then it finds the host converged, or finishes the work. Neither
// deletes the other's temp rootfs (they used to), so both succeed, and
// the node is Ready.
func (h *crashHost) concurrentStarts(t *testing.T) {
	type result struct {
		pid, stdout, stderr string
		err                 error
	}
	launch := func() chan result {
		ch := make(chan result, 1)
		go func() {
			out, stderr, err := h.Run(h.e.ctx, "sh", "-c", `echo "pid $$"; exec "$0" start --join-timeout 2m`, h.sc.agent)
			pid, rest, _ := strings.Cut(out, "\n")
			ch <- result{strings.TrimPrefix(pid, "pid "), rest, stderr, err}
		}()
		return ch
	}
	a := launch()
	time.Sleep(150 * time.Millisecond)
	b := launch()
	ra, rb := <-a, <-b
	for _, r := range []result{ra, rb} {
		if r.err != nil {
			h.dumpMachine(t)
			t.Fatalf("start (pid %s) of two concurrent starts failed: %v\n%s\n%s", r.pid, r.err, r.stdout, r.stderr)
		}
	}
	const waiting = "aks-flex-node: start: waiting for the node lock /var/lib/aks-flex-node/node.lock, held by start (pid "
	aw, bw := strings.Contains(ra.stderr, waiting), strings.Contains(rb.stderr, waiting)
	if aw == bw {
		t.Fatalf("want exactly one start to wait for the other; waited: first %t, second %t\n%s\n%s", aw, bw, ra.stderr, rb.stderr)
	}
	waiter, holder := rb, ra
	if aw {
		waiter, holder = ra, rb
	}
	if !strings.Contains(waiter.stderr, waiting+holder.pid+") since ") {
		t.Errorf("the waiting start does not name the holder, start (pid %s):\n%s", holder.pid, waiter.stderr)
	}
	// It found the rootfs the other unpacked, rather than unpacking (and
	// deleting the other's temp rootfs) again.
	if !strings.Contains(waiter.stderr, "task=provision-machine status=ok changed=false") {
		t.Errorf("the start that waited provisioned the machine again:\n%s", waiter.stderr)
	}
	t.Logf("start (pid %s) waited for start (pid %s): %s", waiter.pid, holder.pid, firstLine(waiter.stderr, "waiting for the node lock"))
	h.recordDurations(holder.stderr)
	h.converge(t, "after two concurrent starts")
}

func firstLine(s, containing string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, containing) {
			return l
		}
	}
	return ""
}

// keeperRace: a start crashes while the agent's machine keeper wants to
// start the machine. The start holds the node lock (it hangs after its
// first task); the machine is powered off under it; the keeper, every 2s,
// skips its pass, naming the start as the holder, and leaves the machine
// off. Then the start is killed (kill -9) or the host loses power. The
// keeper, which may act again, brings the machine back while a re-run of
// start converges to a Ready node.
func (h *crashHost) keeperRace(t *testing.T, kind, first string) {
	dir := "/var/tmp/failpoints-keeper-" + strings.ReplaceAll(kind, " ", "")
	cursor := h.journalCursor(t)
	ctx, cancel := context.WithCancel(h.e.ctx)
	cmd := h.Command(ctx, append(append([]string{"env"}, failpointEnv(first, "hang", dir)...), h.sc.agent, "start")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { cancel(); <-done }()
	reached := dir + "/" + first + ".reached"
	if !h.waitFor(reached, done, time.Minute) {
		t.Fatalf("start never reached %s:\n%s", first, stderr.String())
	}
	pid, err := os.ReadFile(h.Path(reached))
	if err != nil {
		t.Fatal(err)
	}
	h.RunOK(t, "machinectl", "poweroff", "kube1")
	h.waitMachine(t, "inactive", time.Minute)
	skipped := `keep-machine: skipped this pass; another command is changing the node" holder="start (pid ` + string(pid) + ") since "
	h.waitJournal(t, cursor, skipped, 15*time.Second)
	if st := h.machineState(t); st != "inactive" {
		t.Fatalf("the keeper started the machine while start held the node lock (state %s)", st)
	}
	if kind == kill9 {
		h.RunOK(t, "kill", "-9", string(pid))
		<-done
		// Nothing holds the lock now: the keeper's next pass starts the
		// machine of the joined host.
		h.waitJournal(t, cursor, "machine is not running on a joined host; starting it", 15*time.Second)
	} else if err := h.PowerCycle(h.e.ctx); err != nil {
		t.Fatal(err)
	}
	// After a power cut the keeper starts the machine at boot, as this
	// start runs.
	h.converge(t, "after start crashed by "+kind+" while the keeper ran")
}

func (h *crashHost) machineState(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(h.RunOK(t, "systemctl", "show", "-p", "ActiveState", "--value", "systemd-nspawn@kube1.service"))
}

func (h *crashHost) waitMachine(t *testing.T, state string, max time.Duration) {
	t.Helper()
	deadline := time.Now().Add(max)
	for h.machineState(t) != state {
		if time.Now().After(deadline) {
			t.Fatalf("machine kube1 not %s after %v (it is %s)", state, max, h.machineState(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// journalCursor is the cursor of the host journal's newest entry.
func (h *crashHost) journalCursor(t *testing.T) string {
	t.Helper()
	var e struct {
		Cursor string `json:"__CURSOR"`
	}
	out := h.RunOK(t, "journalctl", "--no-pager", "-o", "json", "-n", "1")
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil || e.Cursor == "" {
		t.Fatalf("journal cursor: %v\n%s", err, out)
	}
	return e.Cursor
}

// waitJournal waits until the agent's journal after cursor says want.
func (h *crashHost) waitJournal(t *testing.T, cursor, want string, max time.Duration) {
	t.Helper()
	deadline := time.Now().Add(max)
	for {
		out, _, _ := h.Run(h.e.ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "aks-flex-node-agent.service", "--after-cursor", cursor)
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not log %q within %v:\n%s", want, max, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// kill9Mid is a crash in the middle of a task: the command is killed
// half-way through the task by the clock (half the time the task took on
// this host's first start), not at a failpoint.
const kill9Mid = "kill -9 mid-task"

// minMidTask: tasks quicker than this on the first start are not crashed
// in the middle; there is no middle to speak of.
const minMidTask = 300 * time.Millisecond

var taskLine = regexp.MustCompile(`task=([a-z0-9-]+) status=ok changed=(?:true|false) duration=([0-9.]+[a-zµ]+)`)

// recordDurations keeps how long each task of a first start took, from
// its log lines.
func (h *crashHost) recordDurations(stderr string) {
	h.durations = map[string]time.Duration{}
	for _, m := range taskLine.FindAllStringSubmatch(stderr, -1) {
		if d, err := time.ParseDuration(m[2]); err == nil {
			h.durations[m[1]] = d
		}
	}
}

// midTaskChain crashes start in the middle of each task that takes a
// while, each re-run recovering from the crash before; then converges
// and checks as the other chains do. It runs on a host that never joined.
func (h *crashHost) midTaskChain(t *testing.T, kind string, tasks []string) {
	before := h.crashSnap(t, "before")
	var snaps []crashSnap
	for _, step := range tasks {
		d := h.durations[step]
		if d < minMidTask {
			continue
		}
		begin := time.Now()
		where := h.crashDuring(t, step, d/2)
		snaps = append(snaps, h.crashSnap(t, where))
		h.checkStateFile(t, kind, where)
		t.Logf("start, %s at %s: %v", kind, where, time.Since(begin).Round(10*time.Millisecond))
	}
	if len(snaps) == 0 {
		t.Fatalf("no task of start took %v or more: %v", minMidTask, h.durations)
	}
	h.converge(t, "start after "+kind)
	final := h.crashSnap(t, "converged")
	checkOldOrNew(t, "start, "+kind, before, final, snaps)
}

// crashDuring runs start, waits until it says it began step, and after
// delay kills it. It returns where the crash landed.
func (h *crashHost) crashDuring(t *testing.T, step string, delay time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithCancel(h.e.ctx)
	cmd := h.Command(ctx, "sh", "-c", `echo "pid $$"; exec "$0" start --join-timeout 2m`, h.sc.agent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	defer func() { cancel(); <-done }()
	pid, began := "", false
	for l := range lines {
		if p, ok := strings.CutPrefix(l, "pid "); ok {
			pid = p
		}
		if l == "[start] "+step+" ..." {
			began = true
			break
		}
	}
	if !began || pid == "" {
		t.Fatalf("start never began %s:\n%s", step, stderr.String())
	}
	go func() {
		for range lines {
		}
	}()
	time.Sleep(delay)
	where := fmt.Sprintf("%s +%v", step, delay.Round(time.Millisecond))
	if _, _, err := h.Run(h.e.ctx, "kill", "-9", pid); err != nil {
		t.Logf("%s: start had already finished: %v", where, err)
	}
	return where
}

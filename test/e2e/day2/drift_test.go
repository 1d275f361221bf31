package day2

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

const (
	// reconcileInterval is agent.machineReconcileInterval in the config.
	reconcileInterval = 2 * time.Second
	// repairSlack is what a repair may take beyond one interval: the pass
	// itself (systemctl in the machine, a restart), and the poll.
	repairSlack   = 3 * time.Second
	kubeletConfig = machineRoot + "/var/lib/kubelet/config.yaml"
	kubeletUnit   = machineRoot + "/etc/systemd/system/kubelet.service"
	// foreignFile is in the machine but not the agent's: left as edited.
	foreignFile = machineRoot + "/etc/hosts"
)

// drift: what the agent keeps inside the machine comes back within one
// reconcile interval, each with a Repaired Event saying what; what it
// does not own stays as an admin left it.
func (e *env) drift(t *testing.T) {
	// The machine the last case stopped is back and booted.
	kubetest.WaitReady(e.ctx, t, e.cp.Client, nodeName, 2*time.Minute)
	t.Run("kubelet-config-edited", e.driftKubeletConfig)
	t.Run("kubelet-unit-removed", e.driftKubeletUnitRemoved)
	t.Run("containerd-stopped", e.driftContainerdStopped)
	kubetest.WaitReady(e.ctx, t, e.cp.Client, nodeName, 2*time.Minute)
	if out := e.h.RunOK(t, agent, "status"); !strings.Contains(out, "node-file-edited") || !strings.Contains(out, "unit-stopped") {
		t.Errorf("status does not show the last repairs:\n%s", out)
	}
}

func (e *env) driftKubeletConfig(t *testing.T) {
	hp := e.h.Path(kubeletConfig)
	want, err := os.ReadFile(hp)
	if err != nil {
		t.Fatal(err)
	}
	fhp := e.h.Path(foreignFile)
	foreign, err := os.ReadFile(fhp)
	if err != nil {
		t.Fatal(err)
	}
	edited := append(append([]byte{}, foreign...), "# day2: an admin's edit\n"...)
	must(t, os.WriteFile(fhp, edited, 0o644))
	defer func() { _ = os.WriteFile(fhp, foreign, 0o644) }()
	since := time.Now()
	must(t, os.WriteFile(hp, append(append([]byte{}, want...), "# day2: edited behind the agent's back\n"...), 0o644))
	took := e.waitFor(t, "kubelet config restored", func() bool {
		got, err := os.ReadFile(hp)
		return err == nil && bytes.Equal(got, want)
	})
	t.Logf("BENCH drift-repair kind=kubelet-config-edited latency=%v", took.Round(time.Millisecond))
	e.waitEventSaying(t, "Repaired", "/var/lib/kubelet/config.yaml in machine kube1 was edited", since)
	if got, _ := os.ReadFile(fhp); !bytes.Equal(got, edited) {
		t.Errorf("the agent changed %s, which it does not own:\n%s", foreignFile, got)
	}
}

func (e *env) driftContainerdStopped(t *testing.T) {
	show := func() string {
		out, _, _ := e.h.Shell(e.ctx, `nsenter -t "$(machinectl show kube1 -p Leader --value)" -a -- systemctl show containerd.service -p ActiveState -p InvocationID`)
		return strings.Join(strings.Fields(out), " ")
	}
	e.waitMachineAtRest(t)
	was := show()
	since := time.Now()
	e.inMachine(t, "systemctl", "stop", "containerd.service")
	t.Logf("containerd was %s; after the stop %s", was, show())
	defer func() {
		if t.Failed() {
			t.Logf("in the machine:\n%s", e.inMachine(t, "journalctl", "--no-pager", "-n", "40", "-u", "containerd.service", "-u", "kubelet.service"))
		}
	}()
	took := e.waitFor(t, "containerd active again", func() bool {
		now := show()
		return strings.Contains(now, "ActiveState=active") && now != was
	})
	t.Logf("BENCH drift-repair kind=containerd-stopped latency=%v", took.Round(time.Millisecond))
	e.waitEventSaying(t, "Repaired", "containerd.service in machine kube1 was inactive", since)
}

func (e *env) driftKubeletUnitRemoved(t *testing.T) {
	hp := e.h.Path(kubeletUnit)
	want, err := os.ReadFile(hp)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	must(t, os.Remove(hp))
	took := e.waitFor(t, "kubelet unit restored", func() bool {
		got, err := os.ReadFile(hp)
		return err == nil && bytes.Equal(got, want)
	})
	t.Logf("BENCH drift-repair kind=kubelet-unit-removed latency=%v", took.Round(time.Millisecond))
	e.waitEventSaying(t, "Repaired", "/etc/systemd/system/kubelet.service in machine kube1 was deleted", since)
	out := e.inMachine(t, "systemctl", "show", "kubelet.service", "-p", "ActiveState", "-p", "NeedDaemonReload", "-p", "ActiveEnterTimestampMonotonic")
	if !strings.Contains(out, "ActiveState=active") || !strings.Contains(out, "NeedDaemonReload=no") {
		t.Errorf("kubelet after its unit was restored:\n%s", out)
	}
}

// waitMachineAtRest waits, bounded, until the machine's systemd has no
// job queued and the kubelet and containerd run: the repairs of the cases
// before (each restarts the kubelet, whose Requires= pulls containerd in)
// are over. A stop queued while one of them still runs is cancelled by
// systemd ("Job for containerd.service canceled"), which is the earlier
// repair finishing, not this case's drift.
func (e *env) waitMachineAtRest(t *testing.T) {
	t.Helper()
	const bound = 30 * time.Second
	deadline := time.Now().Add(bound)
	last := ""
	for {
		out, _, err := e.h.Shell(e.ctx, `m="$(machinectl show kube1 -p Leader --value)"; `+
			`nsenter -t "$m" -a -- systemctl list-jobs --no-legend; `+
			`nsenter -t "$m" -a -- systemctl show kubelet.service containerd.service -p SubState --value`)
		last = strings.TrimSpace(out)
		// No job lines, and both SubStates running.
		if err == nil && strings.Join(strings.Fields(last), " ") == "running running" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine kube1 not at rest within %v (jobs, then the kubelet's and containerd's SubState):\n%s", bound, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFor polls done every 100ms for one reconcile interval and the
// slack, and returns how long it took.
func (e *env) waitFor(t *testing.T, what string, done func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	limit := reconcileInterval + repairSlack
	for !done() {
		if time.Since(began) > limit {
			t.Fatalf("%s: not within %v (one reconcile interval and %v)", what, limit, repairSlack)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(began)
}

// waitEventSaying waits for an Event with reason whose message contains
// text, recorded after since.
func (e *env) waitEventSaying(t *testing.T, reason, text string, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !e.hasEventSaying(reason, text, since) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event saying %q on Node %s", reason, text, nodeName)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hasEventSaying says whether the Node has an Event with reason whose
// message contains text, recorded after since.
func (e *env) hasEventSaying(reason, text string, since time.Time) bool {
	list, err := e.cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason})
	if err != nil {
		return false
	}
	for _, ev := range list.Items {
		if strings.Contains(ev.Message, text) && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
			return true
		}
	}
	return false
}

package repave

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startRepave: the config names the next Kubernetes version and start
// runs. It repaves kube1 (joined) onto kube2 as node upgrade would (the
// same checks: pods evicted and back, the Node's name and UID unchanged,
// Ready at the new version, kube1 stopped, status), records a Repaved
// Event on the Node, and a second start with that config changes nothing.
func (e *env) startRepave(t *testing.T, w *workload) {
	must(t, e.h.WriteFile("/etc/aks-flex-node/config.json", e.config(e.next), 0o600))
	e.repave(t, w, "kube1", "kube2", "", func() (record, string, error) {
		out, log, err := e.start(t)
		if !strings.Contains(out, "components.kubernetes is "+version+"; machine kube1 runs "+joined+": repaving the node from machine kube1 to machine kube2") {
			t.Errorf("start did not say why it repaves:\n%s", out)
		}
		if !strings.Contains(out, "[OK node-version]: start repaves machine kube1 from Kubernetes "+joined+" to "+version) {
			t.Errorf("start's preflight did not check the new kubelet's skew:\n%s", out)
		}
		s := e.status(t)
		if s.Last == nil {
			t.Fatalf("no last repave in status after start: %+v", s)
		}
		return *s.Last, log, err
	})
	evs, err := e.cp.Client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + nodeName + ",reason=Repaved"})
	must(t, err)
	want := "repaved this node from machine kube1 (Kubernetes " + joined + ") to machine kube2 (Kubernetes " + version + ") in "
	if len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, want) {
		t.Errorf("Repaved Events on the Node: %+v, want one saying %q", evs.Items, want)
	}
	out, _, err := e.start(t)
	if err != nil || !strings.Contains(out, "already joined: nothing changed") {
		t.Errorf("a second start with the same config: %v\n%s", err, out)
	}
	if s := e.status(t); s.Active != "kube2" || e.machineState(t, "kube1") == "active" {
		t.Errorf("after the second start: active %s, kube1 %s", s.Active, e.machineState(t, "kube1"))
	}
}

// start runs start and returns its output, its log and its error.
func (e *env) start(t *testing.T) (string, string, error) {
	t.Helper()
	began := time.Now()
	out, stderr, err := e.h.Run(e.ctx, agent, "start", "--join-timeout", "2m", "--drain-timeout", "2m")
	t.Logf("start: %v in %v\n%s", err, time.Since(began).Round(time.Millisecond), out)
	return out, stderr, err
}

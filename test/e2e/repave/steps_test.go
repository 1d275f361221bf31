package repave

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/test/fixtures"
)

// workload is the Deployment (2 replicas) and its PodDisruptionBudget.
type workload struct {
	ctx context.Context
	c   kubernetes.Interface
}

const app = "web"

func (e *env) deploy(t *testing.T) *workload {
	w := &workload{ctx: e.ctx, c: e.cp.Client}
	replicas, grace := int32(2), int64(1)
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "main", Image: fixtures.BusyboxImageRef, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}}},
			}}},
	}
	min := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := w.c.AppsV1().Deployments("default").Create(e.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.PolicyV1().PodDisruptionBudgets("default").Create(e.ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRunning(t)
	return w
}

// waitRunning waits for the Deployment's 2 pods to be Ready on the node
// and returns their names.
func (w *workload) waitRunning(t *testing.T) []string {
	t.Helper()
	var names []string
	last := ""
	err := wait.PollUntilContextTimeout(w.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := w.c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, nil
		}
		names = names[:0]
		var states []string
		for _, p := range pods.Items {
			ready := p.DeletionTimestamp == nil && p.Spec.NodeName == nodeName && p.Status.Phase == corev1.PodRunning
			for _, c := range p.Status.ContainerStatuses {
				ready = ready && c.Ready
			}
			states = append(states, p.Name+"="+string(p.Status.Phase))
			if ready {
				names = append(names, p.Name)
			}
		}
		last = strings.Join(states, ",")
		return len(names) == 2 && len(pods.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("deployment %s not 2 Ready pods on %s after 3m (last: %s)", app, nodeName, last)
	}
	return names
}

// describe logs the budget's status and the workload's pods and their
// Events: the evidence when the budget did not do what a test expected.
func (w *workload) describe(t *testing.T) {
	t.Helper()
	if p, err := w.c.PolicyV1().PodDisruptionBudgets("default").Get(w.ctx, app, metav1.GetOptions{}); err == nil {
		t.Logf("budget %s: generation %d, status %+v", app, p.Generation, p.Status)
	}
	if pods, err := w.c.CoreV1().Pods("default").List(w.ctx, metav1.ListOptions{LabelSelector: "app=" + app}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s: node %q, phase %s, deleted %v, created %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp, p.CreationTimestamp)
		}
	}
	if evs, err := w.c.CoreV1().Events("default").List(w.ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range evs.Items {
			t.Logf("event %s %s/%s: %s: %s", ev.LastTimestamp.Format(time.RFC3339), ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
}

// relaxBudget lets the drain evict both pods: on a one-node cluster no
// pod evicted can come back elsewhere, so minAvailable 1 blocks a drain
// for good (pdb-blocks-the-drain shows it does).
func (w *workload) relaxBudget(t *testing.T) {
	p, err := w.c.PolicyV1().PodDisruptionBudgets("default").Get(w.ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	p.Spec.MinAvailable = &zero
	if _, err := w.c.PolicyV1().PodDisruptionBudgets("default").Update(w.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(w.ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := w.c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, app, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.DisruptionsAllowed == 2, nil
	})
	if err != nil {
		t.Fatalf("budget not relaxed: %v", err)
	}
}

// remove deletes the Deployment and its budget and waits for the pods to
// be gone.
func (w *workload) remove(t *testing.T) {
	t.Helper()
	if err := w.c.AppsV1().Deployments("default").Delete(w.ctx, app, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.c.PolicyV1().PodDisruptionBudgets("default").Delete(w.ctx, app, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(w.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := w.c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the %s pods are not gone after 2m", app)
	}
}

// record is `node upgrade --output json`'s record, and status's.
type record struct {
	FromMachine, ToMachine, FromVersion, ToVersion, Result, Reason, Step string
	Started                                                              time.Time
	Duration                                                             time.Duration
}

type sides struct {
	Active   string `json:"active"`
	Machines map[string]struct {
		KubernetesVersion string `json:"kubernetesVersion"`
		ImageDigest       string `json:"imageDigest"`
		Failed            string `json:"failed"`
	} `json:"machines"`
	Last     *record `json:"last"`
	InFlight *record `json:"inFlight"`
}

func (e *env) status(t *testing.T) sides {
	t.Helper()
	s, err := e.statusOf()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// statusOf is `status --output json`'s node part.
func (e *env) statusOf() (sides, error) {
	out, stderr, err := e.h.Run(e.ctx, agent, "status", "--output", "json")
	if err != nil {
		return sides{}, fmt.Errorf("status: %w\n%s", err, stderr)
	}
	var s struct {
		Node sides `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return sides{}, fmt.Errorf("status json: %w\n%s", err, out)
	}
	return s.Node, nil
}

// machineState is the ActiveState of a machine's unit on the host.
func (e *env) machineState(t *testing.T, name string) string {
	out, _, _ := e.h.Run(e.ctx, "systemctl", "show", "systemd-nspawn@"+name+".service", "-p", "ActiveState", "--value")
	return strings.TrimSpace(out)
}

func (e *env) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodeUpgrade runs `node upgrade` and returns its record (stdout), its
// log (stderr) and its error.
func (e *env) nodeUpgrade(t *testing.T, args ...string) (record, string, error) {
	t.Helper()
	began := time.Now()
	out, stderr, err := e.h.Run(e.ctx, append([]string{agent, "node", "upgrade", "--output", "json"}, args...)...)
	t.Logf("node upgrade %s: %v in %v\n%s", strings.Join(args, " "), err, time.Since(began).Round(time.Millisecond), stderr)
	var r record
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Errorf("node upgrade printed no record: %v\n%s", jerr, out)
	}
	return r, stderr, err
}

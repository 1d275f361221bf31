package events

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
)

func fakeRecorder(t *testing.T) (*Recorder, *fake.Clientset, *int) {
	t.Helper()
	cs := fake.NewClientset()
	writes := 0
	cs.PrependReactor("*", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" || a.GetVerb() == "patch" {
			writes++
		}
		return false, nil, nil
	})
	return New("node-1", func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }, nil), cs, &writes
}

func listEvents(t *testing.T, cs *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// An Event is on the Node, from aks-flex-node, as the kubelet refers to
// its Node; a repeat counts on the first instead of making another.
func TestEventOnNodeAndRepeatsCounted(t *testing.T) {
	r, cs, _ := fakeRecorder(t)
	ctx := context.Background()
	r.Normal(ctx, ReasonJoined, "node %s joined in %s", "node-1", "41s")
	for i := 0; i < 3; i++ {
		r.Normal(ctx, ReasonRepaired, "machine kube1 was inactive on a joined host; started it")
	}
	evs := listEvents(t, cs)
	if len(evs) != 2 {
		t.Fatalf("%d Events, want 2: %v", len(evs), evs)
	}
	for _, e := range evs {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "node-1" || string(e.InvolvedObject.UID) != "node-1" ||
			e.Source.Component != Component || e.ReportingController != Component || e.Type != corev1.EventTypeNormal {
			t.Errorf("Event %+v", e)
		}
		if e.Reason == ReasonRepaired && e.Count != 3 {
			t.Errorf("repeated Event counted %d times, want 3", e.Count)
		}
		if e.Reason == ReasonJoined && e.Message != "node node-1 joined in 41s" {
			t.Errorf("message %q", e.Message)
		}
	}
}

// A loop that fails every pass cannot flood the API server: after a burst
// the correlator drops Events.
func TestRateLimited(t *testing.T) {
	r, _, writes := fakeRecorder(t)
	for i := 0; i < 60; i++ {
		r.Warning(context.Background(), ReasonRepairFailed, "start machine kube1: attempt %d failed", i)
	}
	t.Logf("%d writes for 60 failing passes", *writes)
	if *writes > 26 || *writes < 10 {
		t.Errorf("%d writes for 60 failing passes, want the burst of 25 at most", *writes)
	}
}

// Without the node's credential (no kubeconfig yet) the Event is logged
// as not recorded; nothing fails.
func TestNoCredentialIsLogged(t *testing.T) {
	var log bytes.Buffer
	r := New("node-1", func() (kubeclient.Interface, error) { return nil, errors.New("no /etc/kubernetes/kubelet.conf") }, slog.New(slog.NewTextHandler(&log, nil)))
	r.Normal(context.Background(), ReasonReset, "reset")
	if !strings.Contains(log.String(), "could not record an Event") || !strings.Contains(log.String(), "kubelet.conf") {
		t.Errorf("log: %s", log.String())
	}
	var nilRecorder *Recorder
	nilRecorder.Normal(context.Background(), ReasonJoined, "x")
}

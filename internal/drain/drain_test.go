package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
)

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "n1"}}
}

// A PodDisruptionBudget that refuses the eviction until the bound passes:
// the drain fails naming the pod and why; one that relents lets it finish.
func TestDrainRespectsPDBAndIsBounded(t *testing.T) {
	Poll = 10 * time.Millisecond
	refuse := 3
	cs := fake.NewClientset(pod("guarded"), pod("done"))
	done, _ := cs.CoreV1().Pods("default").Get(context.Background(), "done", metav1.GetOptions{})
	done.Status.Phase = corev1.PodSucceeded
	_, _ = cs.CoreV1().Pods("default").Update(context.Background(), done, metav1.UpdateOptions{})
	var tries []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		tries = append(tries, name)
		if refuse > 0 {
			refuse--
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, cs.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "default", name)
	})
	refuse = 1 << 30
	_, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 50*time.Millisecond, Options{Force: true})
	if err == nil || !strings.Contains(err.Error(), "default/guarded (a PodDisruptionBudget refuses its eviction)") {
		t.Fatalf("drain = %v", err)
	}
	refuse = 2
	n, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 5*time.Second, Options{Force: true})
	if err != nil || n != 1 {
		t.Fatalf("drain = %d, %v", n, err)
	}
	for _, name := range tries {
		if name == "done" {
			t.Errorf("a finished pod was evicted")
		}
	}
}

// Listings that fail near the bound (the client's rate limiter refuses a
// wait past the deadline) do not hide the pods the listing before saw.
func TestDrainNamesThePodsWhenTheLastListingFails(t *testing.T) {
	Poll = 10 * time.Millisecond
	cs := fake.NewClientset(pod("guarded"))
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, apierrors.NewTooManyRequests("budget", 0)
	})
	lists := 0
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lists++; lists < 3 {
			return false, nil, nil
		}
		return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	})
	_, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 60*time.Millisecond, Options{Force: true})
	if err == nil || !strings.Contains(err.Error(), "default/guarded (a PodDisruptionBudget refuses its eviction)") {
		t.Fatalf("drain = %v", err)
	}
}

// Issue 26 item 10: the drain refuses what `kubectl drain` refuses, before
// it evicts anything, naming each pod and why: a pod no controller
// manages (unless Force), a pod with emptyDir data (unless
// DeleteEmptyDirData), a DaemonSet's pod (unless IgnoreDaemonSets, which
// leaves it). With the opt-ins the drain evicts the first two and leaves
// the DaemonSet's; a mirror pod and a finished one are left either way.
func TestDrainRefusesWhatKubectlDrainRefuses(t *testing.T) {
	Poll = 10 * time.Millisecond
	yes := true
	owned := func(p *corev1.Pod, kind string) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: "owner", Controller: &yes}}
		return p
	}
	scratch := owned(pod("scratch"), "ReplicaSet")
	scratch.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mirror := pod("static")
	mirror.Annotations = map[string]string{mirrorAnnotation: "x"}
	done := pod("done")
	done.Status.Phase = corev1.PodSucceeded
	objs := []runtime.Object{owned(pod("web"), "ReplicaSet"), pod("bare"), scratch, owned(pod("ds"), "DaemonSet"), mirror, done}
	var evicted []string
	evicting := func(cs *fake.Clientset) {
		cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
			evicted = append(evicted, name)
			return true, nil, cs.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "default", name)
		})
	}
	cs := fake.NewClientset(objs...)
	evicting(cs)
	_, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", time.Second, Options{})
	var refused *RefusedError
	if !errors.As(err, &refused) || len(evicted) != 0 {
		t.Fatalf("drain = %v, evicted %v", err, evicted)
	}
	for _, want := range []string{
		"cannot delete Pods that declare no controller (use --force to override): default/bare",
		"cannot delete Pods with local storage (use --delete-emptydir-data to override): default/scratch",
		"cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore them): default/ds",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	cs = fake.NewClientset(objs...)
	evicting(cs)
	n, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 5*time.Second, Options{IgnoreDaemonSets: true, Force: true, DeleteEmptyDirData: true})
	slices.Sort(evicted)
	if err != nil || n != 3 || strings.Join(evicted, ",") != "bare,scratch,web" {
		t.Fatalf("drain with the opt-ins = %d, %v; evicted %v", n, err, evicted)
	}
}

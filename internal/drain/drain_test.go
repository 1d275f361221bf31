package drain

import (
	"context"
	"errors"
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
	_, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "default/guarded (a PodDisruptionBudget refuses its eviction)") {
		t.Fatalf("drain = %v", err)
	}
	refuse = 2
	n, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 5*time.Second)
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
	_, err := Drain(context.Background(), kubeclienttest.Wrap(cs), "n1", 60*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "default/guarded (a PodDisruptionBudget refuses its eviction)") {
		t.Fatalf("drain = %v", err)
	}
}

// Package drain empties a node of its pods through the Eviction API, as
// `kubectl drain` does: PodDisruptionBudgets are respected (an eviction
// they refuse is retried), DaemonSet pods and mirror pods are left, and
// the whole drain is bounded in time, naming the pods that blocked it when
// the bound passes. It runs with the node's own credential: the Node
// authorizer lets a node list the pods bound to it and evict them, and
// NodeRestriction holds it to those.
package drain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// mirrorAnnotation marks a static pod's mirror in the API server.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// Poll is how often the drain retries refused evictions and looks again.
var Poll = time.Second

// Drain evicts every pod bound to node that a drain evicts and waits,
// up to timeout, until they are gone. It returns how many pods it
// evicted; an error after the timeout names the pods left.
func Drain(ctx context.Context, cs kubeclient.Interface, node string, timeout time.Duration) (int, error) {
	evicted := map[string]bool{}
	var left []string
	err := wait.PollUntilContextTimeout(ctx, Poll, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			// A listing can fail on the bound itself (the client's rate
			// limiter refuses a wait past the deadline before it comes):
			// the pods the listing before saw are still what is left.
			if len(left) == 0 {
				left = []string{"(listing pods: " + err.Error() + ")"}
			}
			return false, nil
		}
		left = left[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			if !evictable(p) {
				continue
			}
			key := p.Namespace + "/" + p.Name
			left = append(left, key)
			if p.DeletionTimestamp != nil {
				continue // evicted, terminating
			}
			if why := evict(ctx, cs, p); why != "" {
				left[len(left)-1] = key + " (" + why + ")"
				continue
			}
			evicted[key] = true
		}
		return len(left) == 0, nil
	})
	if err != nil {
		slices.Sort(left)
		return len(evicted), fmt.Errorf("drain node %s: pods left after %v: %s", node, timeout, strings.Join(left, ", "))
	}
	return len(evicted), nil
}

// evictable: a pod a drain evicts (not a mirror, not a DaemonSet's, not
// finished).
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[mirrorAnnotation]; mirror {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}

// evict asks the Eviction API to evict p; "" when it was accepted or the
// pod is gone, else why not (a PodDisruptionBudget, an error), retried.
func evict(ctx context.Context, cs kubeclient.Interface, p *corev1.Pod) string {
	err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return ""
	case apierrors.IsTooManyRequests(err):
		return "a PodDisruptionBudget refuses its eviction"
	default:
		return err.Error()
	}
}

// Package drain empties a node of its pods through the Eviction API, by
// `kubectl drain`'s rules: PodDisruptionBudgets are respected (an eviction
// they refuse is retried), mirror pods and finished pods are left, and a
// pod kubectl refuses to drain (no controller, emptyDir data, a
// DaemonSet's) refuses the whole drain before anything is evicted, unless
// the matching opt-in (Options) says otherwise. The drain is bounded in
// time, naming the pods that blocked it when the bound passes. It runs with the node's own credential: the Node
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

// Options are kubectl drain's opt-ins, by its flags' names.
type Options struct {
	// IgnoreDaemonSets leaves a DaemonSet's pods (--ignore-daemonsets);
	// without it they refuse the drain (their controller would put them
	// back at once).
	IgnoreDaemonSets bool
	// Force evicts pods no controller manages (--force): nothing
	// recreates them, so they are gone for good.
	Force bool
	// DeleteEmptyDirData evicts pods with emptyDir volumes
	// (--delete-emptydir-data): their data is deleted with them.
	DeleteEmptyDirData bool
}

// RefusedError is a drain that refused to start: the pods kubectl drain
// would refuse, by reason, each reason saying its opt-in.
type RefusedError struct {
	Node    string
	Reasons []string // "<reason>: ns/pod, ns/pod"
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("drain node %s: refused, nothing evicted: %s", e.Node, strings.Join(e.Reasons, "; "))
}

// Why kubectl drain refuses a pod, in its words.
const (
	reasonDaemonSet  = "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore them)"
	reasonUnmanaged  = "cannot delete Pods that declare no controller (use --force to override)"
	reasonLocalStore = "cannot delete Pods with local storage (use --delete-emptydir-data to override)"
)

// Drain evicts every pod bound to node that a drain evicts and waits,
// up to timeout, until they are gone. It returns how many pods it
// evicted; a *RefusedError (before anything is evicted) names the pods
// o does not let it evict; an error after the timeout names the pods
// left.
func Drain(ctx context.Context, cs kubeclient.Interface, node string, timeout time.Duration, o Options) (int, error) {
	evicted := map[string]bool{}
	var left []string
	var refused *RefusedError
	checked := false
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
		if !checked {
			checked = true
			if refused = o.refuse(node, pods.Items); refused != nil {
				return false, refused
			}
		}
		left = left[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			if !evictable(p) || daemonSetPod(p) {
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
	if refused != nil {
		return 0, refused
	}
	if err != nil {
		slices.Sort(left)
		return len(evicted), fmt.Errorf("drain node %s: pods left after %v: %s", node, timeout, strings.Join(left, ", "))
	}
	return len(evicted), nil
}

// refuse is the drain's refusal of pods, as kubectl drain's filters
// judge them (nil when none is refused).
func (o Options) refuse(node string, pods []corev1.Pod) *RefusedError {
	byReason := map[string][]string{}
	for i := range pods {
		p := &pods[i]
		if !evictable(p) {
			continue
		}
		key := p.Namespace + "/" + p.Name
		switch {
		case daemonSetPod(p):
			if !o.IgnoreDaemonSets {
				byReason[reasonDaemonSet] = append(byReason[reasonDaemonSet], key)
			}
			continue
		case metav1.GetControllerOf(p) == nil && !o.Force:
			byReason[reasonUnmanaged] = append(byReason[reasonUnmanaged], key)
		}
		if hasEmptyDir(p) && !o.DeleteEmptyDirData {
			byReason[reasonLocalStore] = append(byReason[reasonLocalStore], key)
		}
	}
	if len(byReason) == 0 {
		return nil
	}
	e := &RefusedError{Node: node}
	for _, r := range []string{reasonUnmanaged, reasonLocalStore, reasonDaemonSet} {
		if ps := byReason[r]; len(ps) > 0 {
			slices.Sort(ps)
			e.Reasons = append(e.Reasons, r+": "+strings.Join(ps, ", "))
		}
	}
	return e
}

// evictable: a pod a drain acts on (not a mirror, not finished).
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[mirrorAnnotation]; mirror {
		return false
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// daemonSetPod: a pod a DaemonSet controls.
func daemonSetPod(p *corev1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

func hasEmptyDir(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
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

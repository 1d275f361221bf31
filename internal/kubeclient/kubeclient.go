// Package kubeclient is the node's typed client for the Kubernetes API:
// the few resources aks-flex-node reads and writes with the node's own
// credential (its Node, the Nodes it routes to, the Pods it drains, the
// Events it records, the server's version), over client-go's REST client
// with a scheme that holds only core/v1 and policy/v1.
//
// It stands where client-go's generated clientset would: the clientset
// registers every API group at process start, and this binary is also the
// kubelet's exec credential plugin (`token kubelogin`), which the kubelet
// runs for every token it needs; the plugin must start fast. The method
// sets mirror the clientset's, so a test can hand it client-go's fake
// clientset through kubeclienttest.Wrap. Nothing in the product imports
// the clientset (a test in this package fails when something does).
package kubeclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
)

// Interface is the API as the node uses it.
type Interface interface {
	CoreV1() CoreV1
	PolicyV1() PolicyV1
	Discovery() Discovery
}

// CoreV1 is the core group's resources the node uses.
type CoreV1 interface {
	Nodes() Nodes
	Pods(namespace string) Pods
	Events(namespace string) Events
}

// Nodes reads, follows and patches Node objects.
type Nodes interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// Pods lists Pods (a drain's).
type Pods interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}

// Events creates and patches Events.
type Events interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error)
}

// PolicyV1 is the policy group's resources the node uses.
type PolicyV1 interface {
	Evictions(namespace string) Evictions
}

// Evictions evicts Pods, honouring their disruption budgets.
type Evictions interface {
	Evict(ctx context.Context, eviction *policyv1.Eviction) error
}

// Discovery tells the server's version.
type Discovery interface {
	ServerVersion() (*version.Info, error)
}

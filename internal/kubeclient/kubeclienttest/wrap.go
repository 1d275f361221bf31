// Package kubeclienttest hands client-go's fake clientset (its object
// tracker, reactors and watches) to code that takes a kubeclient.Interface.
// Tests only: it links the generated clientset, which the product must not.
package kubeclienttest

import (
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// Wrap is cs as a kubeclient.Interface.
func Wrap(cs kubernetes.Interface) kubeclient.Interface { return wrapped{cs} }

type wrapped struct{ cs kubernetes.Interface }

func (w wrapped) CoreV1() kubeclient.CoreV1       { return core{w.cs} }
func (w wrapped) PolicyV1() kubeclient.PolicyV1   { return policy{w.cs} }
func (w wrapped) Discovery() kubeclient.Discovery { return w.cs.Discovery() }

type core struct{ cs kubernetes.Interface }

func (c core) Nodes() kubeclient.Nodes            { return c.cs.CoreV1().Nodes() }
func (c core) Pods(ns string) kubeclient.Pods     { return c.cs.CoreV1().Pods(ns) }
func (c core) Events(ns string) kubeclient.Events { return c.cs.CoreV1().Events(ns) }

type policy struct{ cs kubernetes.Interface }

func (p policy) Evictions(ns string) kubeclient.Evictions { return p.cs.PolicyV1().Evictions(ns) }

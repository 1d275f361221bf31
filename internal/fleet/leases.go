package fleet

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Store keeps a rollout's slots as Lease-shaped records in one
// namespace: coordination.k8s.io/v1 Leases (NewLeases), or FlexNodeSlots
// (NewSlotStore), which the agents use because NodeRestriction refuses a
// node's credential every Lease outside kube-node-lease.
type Store interface {
	List(ctx context.Context) (*coordinationv1.LeaseList, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Update is a compare-and-swap: it fails with a Conflict unless
	// l.ResourceVersion is the stored one.
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// leaseCodecs is coordination/v1 and flexnode.azure.com/v1alpha1 alone, made on first use (the binary is
// also the kubelet's credential plugin and must start fast), as
// internal/kubeclient does for core/v1: client-go's generated clientset
// is not linked (kubeclient's TestBinaryHasNoClientset).
var leaseCodecs = sync.OnceValues(func() (serializer.CodecFactory, runtime.ParameterCodec) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{coordinationv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("fleet scheme: %v", err)) // a programming error
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s), runtime.NewParameterCodec(s)
})

// NewLeases is the coordination.k8s.io/v1 Leases of namespace ns on the
// server c names; hc is the HTTP client to share (nil: one made for c).
func NewLeases(c *rest.Config, hc *http.Client, ns string) (Store, error) {
	rc, pc, err := restClient(c, hc, coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("lease client: %w", err)
	}
	return &leases{rc: rc, params: pc, ns: ns}, nil
}

func restClient(c *rest.Config, hc *http.Client, gv schema.GroupVersion) (*rest.RESTClient, runtime.ParameterCodec, error) {
	cfg := *c
	cf, pc := leaseCodecs()
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = cf.WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	var rc *rest.RESTClient
	var err error
	if hc != nil {
		rc, err = rest.RESTClientForConfigAndClient(&cfg, hc)
	} else {
		rc, err = rest.RESTClientFor(&cfg)
	}
	return rc, pc, err
}

type leases struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
	ns     string
}

func (l *leases) List(ctx context.Context) (*coordinationv1.LeaseList, error) {
	out := &coordinationv1.LeaseList{}
	// A quorum read, not the watch cache: every write after it is a
	// compare-and-swap, so a stale list could not double-book a slot, but a
	// restarted agent must see the slot it took a moment ago to re-adopt it
	// rather than take a second one. Acquire is rare (once per node per
	// rollout), so the etcd read is not a steady cost.
	opts := metav1.ListOptions{}
	err := l.rc.Get().Namespace(l.ns).Resource("leases").VersionedParams(&opts, l.params).Do(ctx).Into(out)
	return out, err
}

func (l *leases) Create(ctx context.Context, in *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rc.Post().Namespace(l.ns).Resource("leases").Body(in).Do(ctx).Into(out)
	return out, err
}

func (l *leases) Update(ctx context.Context, in *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.rc.Put().Namespace(l.ns).Resource("leases").Name(in.Name).Body(in).Do(ctx).Into(out)
	return out, err
}

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

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Store keeps a rollout's slots as Lease-shaped records in one namespace:
// FlexNodeSlots (NewSlotStore), not coordination.k8s.io/v1 Leases,
// because NodeRestriction refuses a node's credential every Lease outside
// kube-node-lease. The slot logic is written against Lease values so a
// Lease store could serve it unchanged if that ever changes.
type Store interface {
	List(ctx context.Context) (*coordinationv1.LeaseList, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Update is a compare-and-swap: it fails with a Conflict unless
	// l.ResourceVersion is the stored one.
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// codecs is flexnode.azure.com/v1alpha1 (and coordination/v1, whose
// LeaseSpec a slot's spec is) alone, made on first use (the binary is
// also the kubelet's credential plugin and must start fast), as
// internal/kubeclient does for core/v1: client-go's generated clientset
// is not linked (kubeclient's TestBinaryHasNoClientset).
var codecs = sync.OnceValues(func() (serializer.CodecFactory, runtime.ParameterCodec) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{coordinationv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("fleet scheme: %v", err)) // a programming error
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s), runtime.NewParameterCodec(s)
})

// restClient is a REST client of group version gv on the server c names.
func restClient(c *rest.Config, hc *http.Client, gv schema.GroupVersion) (*rest.RESTClient, runtime.ParameterCodec, error) {
	cf, pc := codecs()
	rc, err := restClientOf(c, hc, gv, "/apis", cf)
	return rc, pc, err
}

// restClientOf is a REST client of gv under apiPath ("/api" for the core
// group) with the codecs cf, on the server c names; hc is the HTTP client
// to share (nil: one made for c).
func restClientOf(c *rest.Config, hc *http.Client, gv schema.GroupVersion, apiPath string, cf serializer.CodecFactory) (*rest.RESTClient, error) {
	cfg := *c
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = cf.WithoutConversion()
	// The product's user agent on every request, as kubeclient sends it:
	// API priority and fairness and the audit log tell the agents by it.
	cfg.UserAgent = buildinfo.UserAgent()
	var rc *rest.RESTClient
	var err error
	if hc != nil {
		rc, err = rest.RESTClientForConfigAndClient(&cfg, hc)
	} else {
		rc, err = rest.RESTClientFor(&cfg)
	}
	return rc, err
}

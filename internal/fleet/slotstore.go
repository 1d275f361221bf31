package fleet

import (
	"context"
	"fmt"
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// NewSlotStore is the FlexNodeSlots of namespace ns on the server c
// names, seen as Leases (a FlexNodeSlot is a Lease's metadata and spec
// under another group: see its type); hc is the HTTP client to share
// (nil: one made for c).
func NewSlotStore(c *rest.Config, hc *http.Client, ns string) (Store, error) {
	rc, pc, err := restClient(c, hc, v1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("slot client: %w", err)
	}
	return &slotStore{rc: rc, params: pc, ns: ns}, nil
}

type slotStore struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
	ns     string
}

func toLease(s *v1alpha1.FlexNodeSlot) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: s.ObjectMeta, Spec: s.Spec}
}

func toSlot(l *coordinationv1.Lease) *v1alpha1.FlexNodeSlot {
	return &v1alpha1.FlexNodeSlot{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "FlexNodeSlot"},
		ObjectMeta: l.ObjectMeta, Spec: l.Spec,
	}
}

func (s *slotStore) List(ctx context.Context) (*coordinationv1.LeaseList, error) {
	in := &v1alpha1.FlexNodeSlotList{}
	// A quorum read, not the watch cache: every write after it is a
	// compare-and-swap, so a stale list could not double-book a slot, but a
	// restarted agent must see the slot it took a moment ago to re-adopt it
	// rather than take a second one. Acquire is rare (once per node per
	// rollout), so the etcd read is not a steady cost.
	opts := metav1.ListOptions{}
	if err := s.rc.Get().Namespace(s.ns).Resource(v1alpha1.SlotResource).VersionedParams(&opts, s.params).Do(ctx).Into(in); err != nil {
		return nil, err
	}
	out := &coordinationv1.LeaseList{ListMeta: in.ListMeta}
	for i := range in.Items {
		out.Items = append(out.Items, *toLease(&in.Items[i]))
	}
	return out, nil
}

func (s *slotStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &v1alpha1.FlexNodeSlot{}
	err := s.rc.Post().Namespace(s.ns).Resource(v1alpha1.SlotResource).Body(toSlot(l)).Do(ctx).Into(out)
	return toLease(out), err
}

func (s *slotStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &v1alpha1.FlexNodeSlot{}
	err := s.rc.Put().Namespace(s.ns).Resource(v1alpha1.SlotResource).Name(l.Name).Body(toSlot(l)).Do(ctx).Into(out)
	return toLease(out), err
}

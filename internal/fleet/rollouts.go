package fleet

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Rollouts reads and writes the FlexNodeRollouts of one server: the
// agents (watch, and the elected status writer) and `fleet` (get, list,
// patch) share it. A REST client of the one group rather than a generated
// clientset, for the reason store.go's codecs give.
type Rollouts struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

// NewRollouts is the rollouts on the server c names; hc is the HTTP
// client to share (nil: one made for c).
func NewRollouts(c *rest.Config, hc *http.Client) (*Rollouts, error) {
	rc, pc, err := restClient(c, hc, v1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("rollout client: %w", err)
	}
	return &Rollouts{rc: rc, params: pc}, nil
}

// Get is rollout name.
func (r *Rollouts) Get(ctx context.Context, name string) (*v1alpha1.FlexNodeRollout, error) {
	out := &v1alpha1.FlexNodeRollout{}
	err := r.rc.Get().Resource(v1alpha1.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List is the rollouts opts selects.
func (r *Rollouts) List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.FlexNodeRolloutList, error) {
	out := &v1alpha1.FlexNodeRolloutList{}
	err := r.rc.Get().Resource(v1alpha1.Resource).VersionedParams(&opts, r.params).Do(ctx).Into(out)
	return out, err
}

// Watch watches the rollouts opts selects.
func (r *Rollouts) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.rc.Get().Resource(v1alpha1.Resource).VersionedParams(&opts, r.params).Watch(ctx)
}

// UpdateStatus writes ro's status (a compare-and-swap on its
// resourceVersion): the elected status writer's one write.
func (r *Rollouts) UpdateStatus(ctx context.Context, ro *v1alpha1.FlexNodeRollout) (*v1alpha1.FlexNodeRollout, error) {
	out := &v1alpha1.FlexNodeRollout{}
	err := r.rc.Put().Resource(v1alpha1.Resource).Name(ro.Name).SubResource("status").Body(ro).Do(ctx).Into(out)
	return out, err
}

// Patch patches rollout name's spec (fleet pause and resume).
func (r *Rollouts) Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (*v1alpha1.FlexNodeRollout, error) {
	out := &v1alpha1.FlexNodeRollout{}
	err := r.rc.Patch(pt).Resource(v1alpha1.Resource).Name(name).Body(data).Do(ctx).Into(out)
	return out, err
}

// ListWatch is the rollouts as an informer's source. Its first list is
// served from the watch cache (resourceVersion "0", the reflector's
// default), so a thousand agents starting do not each read etcd.
func (r *Rollouts) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, opts)
		},
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Apply creates or updates ro by server-side apply under fieldManager
// (fleet plan): the server merges ro into the rollout of that name, so a
// plan re-applied with changes updates it, and force takes the fields ro
// sets from any other manager (an earlier kubectl apply of the same
// rollout). Beside rollouts.go's methods because it is fleet plan's.
func (r *Rollouts) Apply(ctx context.Context, ro *v1alpha1.FlexNodeRollout, fieldManager string, force bool) (*v1alpha1.FlexNodeRollout, error) {
	obj := ro.DeepCopy()
	obj.APIVersion, obj.Kind = v1alpha1.SchemeGroupVersion.String(), "FlexNodeRollout"
	obj.ResourceVersion, obj.ManagedFields = "", nil
	obj.Status = v1alpha1.RolloutStatus{}
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("apply rollout %s: %w", ro.Name, err)
	}
	out := &v1alpha1.FlexNodeRollout{}
	req := r.rc.Patch(types.ApplyPatchType).Resource(v1alpha1.Resource).Name(ro.Name).
		Param("fieldManager", fieldManager).Body(body)
	if force {
		req = req.Param("force", "true")
	}
	err = req.Do(ctx).Into(out)
	return out, err
}

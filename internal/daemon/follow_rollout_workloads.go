package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// The soak's "pods back" beyond DaemonSets (issue 29): the pods a drain
// evicts are not scheduled back to this node (their controllers make new
// ones wherever there is room), so what is checked is that each
// ReplicaSet and StatefulSet that had a pod on the node before the drain
// has its ready replicas back. A controller still short when the soak
// probes makes the soak wait (fleet.ErrSoakNotYet: its window starts
// again), up to workloadGrace after the switch; short longer than that,
// the soak fails with PodsNotBack naming it.
//
// RBAC: a node's credential may not read apps/v1 objects; `cluster
// prepare --fleet` grants system:nodes get (not list or watch: the agent
// knows each name from its pods' owner references) on replicasets and
// statefulsets (clusterprep.WorkloadReaderRole). In a cluster prepared
// before that, the read is forbidden and the check is skipped with a log
// line: the soak then checks DaemonSets, as before.

// workloadGrace bounds how long after the switch the soak waits for the
// evicted pods' controllers to have their ready replicas back.
const workloadGrace = 5 * time.Minute

// workload is a ReplicaSet or StatefulSet that had a pod on the node.
type workload struct {
	Kind, Namespace, Name string
	UID                   types.UID
}

func (w workload) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// workloadReplicas is what the check reads of a controller.
type workloadReplicas struct {
	UID   types.UID
	Want  int32 // spec.replicas (1 when unset, as the API server defaults it)
	Ready int32 // status.readyReplicas
}

// workloadsOf are the ReplicaSets and StatefulSets of pods.
func workloadsOf(pods []corev1.Pod) []workload {
	seen := map[types.UID]bool{}
	var out []workload
	for i := range pods {
		ref := metav1.GetControllerOf(&pods[i])
		if ref == nil || (ref.Kind != "ReplicaSet" && ref.Kind != "StatefulSet") || !strings.HasPrefix(ref.APIVersion, "apps/") || seen[ref.UID] {
			continue
		}
		seen[ref.UID] = true
		out = append(out, workload{Kind: ref.Kind, Namespace: pods[i].Namespace, Name: ref.Name, UID: ref.UID})
	}
	return out
}

// workloadCheck is the soak's check of the controllers noted before a
// drain.
type workloadCheck struct {
	get       func(ctx context.Context, w workload) (workloadReplicas, error)
	workloads []workload
	since     time.Time // the switch's end; under rolloutHost.mu
	now       func() time.Time

	forbidden sync.Once
	log       func(msg string, args ...any)
}

// back is nil when every noted controller has its ready replicas back
// (or is gone, or was made anew); ErrSoakNotYet while some are short
// within the grace; PodsNotBack after it.
func (c *workloadCheck) back(ctx context.Context, since time.Time) error {
	var short []string
	for _, w := range c.workloads {
		r, err := c.get(ctx, w)
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted since: nothing to wait for
		case apierrors.IsForbidden(err):
			c.forbidden.Do(func() {
				c.log(followRolloutLoop+": the node may not read ReplicaSets and StatefulSets; the soak checks DaemonSet pods only (run aks-flex-node cluster prepare --fleet again to grant it)", "error", err)
			})
			return nil
		case err != nil:
			return fmt.Errorf("read %s: %w", w, err)
		case r.UID != w.UID:
			continue // made anew under the name: not the one that was here
		}
		if r.Ready < r.Want {
			short = append(short, fmt.Sprintf("%s (%d/%d ready)", w, r.Ready, r.Want))
		}
	}
	if len(short) == 0 {
		return nil
	}
	slices.Sort(short)
	err := fmt.Errorf("the pods evicted by the drain are not all back: %s", strings.Join(short, ", "))
	if c.now().Sub(since) < workloadGrace {
		return fmt.Errorf("%w: %w", fleet.ErrSoakNotYet, err)
	}
	return &fleet.StepError{Step: fleet.StepSoak, Reason: "PodsNotBack", Err: fmt.Errorf("%w for %s after the switch", err, workloadGrace)}
}

// noteWorkloads is the check of the controllers of the pods the node
// runs now (before its drain); nil when they cannot be read.
func (h *rolloutHost) noteWorkloads(ctx context.Context) *workloadCheck {
	pods, err := h.listPods(ctx)
	if err != nil {
		h.log.Warn(followRolloutLoop+": note the node's pods before the drain; the soak will not wait for their controllers", "error", err)
		return nil
	}
	return &workloadCheck{get: h.getWorkload, workloads: workloadsOf(pods), now: time.Now, log: h.log.Warn}
}

// getWorkload reads a controller's replicas with the node's credential:
// one GET (kubeclient's scheme holds core and policy only; this is the
// one apps/v1 read, decoded into the few fields it needs).
func (h *rolloutHost) getWorkload(ctx context.Context, w workload) (workloadReplicas, error) {
	cfg, err := node.ClientConfig(h.config, h.layout, h.layout.OnRoot(h.layout.MachineDir(state.Open(h.layout).ActiveMachine())))
	if err != nil {
		return workloadReplicas{}, fmt.Errorf("the node's credential: %w", err)
	}
	hc, err := kubeclient.HTTPClient(cfg, kubeclient.AgentLoop)
	if err != nil {
		return workloadReplicas{}, err
	}
	return getWorkloadReplicas(ctx, hc, cfg.Host, w)
}

// getWorkloadReplicas GETs w from the API server at host.
func getWorkloadReplicas(ctx context.Context, hc *http.Client, host string, w workload) (workloadReplicas, error) {
	resource := map[string]string{"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}[w.Kind]
	u := strings.TrimRight(host, "/") + "/apis/apps/v1/namespaces/" + url.PathEscape(w.Namespace) + "/" + resource + "/" + url.PathEscape(w.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return workloadReplicas{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return workloadReplicas{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return workloadReplicas{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
			return workloadReplicas{}, apierrors.FromObject(&st)
		}
		return workloadReplicas{}, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var obj struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
		Spec struct {
			Replicas *int32 `json:"replicas"`
		} `json:"spec"`
		Status struct {
			ReadyReplicas int32 `json:"readyReplicas"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return workloadReplicas{}, fmt.Errorf("GET %s: %w", u, err)
	}
	r := workloadReplicas{UID: obj.Metadata.UID, Want: 1, Ready: obj.Status.ReadyReplicas}
	if obj.Spec.Replicas != nil {
		r.Want = *obj.Spec.Replicas
	}
	if r.UID == "" {
		return r, errors.New("GET " + u + ": no metadata.uid in the answer")
	}
	return r, nil
}

// workloadsBack is the soak's check of the controllers noted before the
// switch; nil when none were noted (an agent restarted mid-soak does not
// know them) or the switch's end is not known.
func (h *rolloutHost) workloadsBack(ctx context.Context) error {
	h.mu.Lock()
	c := h.workloads
	var since time.Time
	if c != nil {
		since = c.since
	}
	h.mu.Unlock()
	if since.IsZero() {
		return nil
	}
	return c.back(ctx, since)
}

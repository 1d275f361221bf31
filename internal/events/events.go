// Package events owns the Kubernetes Events aks-flex-node records on its
// Node: what the agent and the commands did to the node (joined, repaired,
// repaved, rolled back, reset), under the reasons below, written with the
// node's own credential (the Node authorizer lets a node create and patch
// Events, and nothing it should not), rate-limited and de-duplicated by
// client-go's event correlator (a burst of 25 per reason type, then one
// every five minutes; a repeat becomes a count on the first).
//
// Recording is synchronous and bounded: a command that exits right after
// an Event (start, reset) must not lose it in a queue, and a loop must not
// hang on an API server that is away. A failure is logged, never returned
// as the failure of what the Event is about. Every method of a nil
// *Recorder does nothing.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
)

// Reasons are public: operators filter on them (kubectl get events
// --field-selector reason=Repaired).
const (
	ReasonJoined       = "Joined"
	ReasonRepaired     = "Repaired"
	ReasonRepairFailed = "RepairFailed"
	ReasonRepaved      = "Repaved"
	ReasonRolledBack   = "RolledBack"
	ReasonRepaveFailed = "RepaveFailed"
	ReasonReset        = "Reset"
	// ReasonPodCIDRRefused: the agent refused another Node's pod CIDR or
	// InternalIP (outside networking.clusterPodCIDR, a reserved range, a
	// next hop off the host's subnets): no route to it.
	ReasonPodCIDRRefused = "PodCIDRRefused"
)

// Component is the Events' source and reporting controller.
const Component = "aks-flex-node"

// timeout bounds one Event's write, the client's requests included.
var timeout = kubeclient.EventWrite.Timeout

// Recorder records Events on one Node.
type Recorder struct {
	nodeName string
	client   func() (kubeclient.Interface, error)
	log      *slog.Logger
	now      func() time.Time

	mu         sync.Mutex
	correlator *record.EventCorrelator
}

// New records on Node nodeName through the client client returns, made
// anew for each Event (the node's certificate rotates; its kubeconfig may
// appear only after the recorder is made).
func New(nodeName string, client func() (kubeclient.Interface, error), log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{nodeName: nodeName, client: client, log: log, now: time.Now,
		correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{})}
}

// ForMachine records on Node nodeName as the node: with its Azure
// identity when c (which may be nil) has one, else with the credential of
// the kubelet in the machine whose root (as this process opens it)
// machineRoot says at each Event: after a repave the node runs in the
// other machine.
func ForMachine(c *config.Config, l layout.Layout, machineRoot func() string, nodeName string, log *slog.Logger) *Recorder {
	return New(nodeName, func() (kubeclient.Interface, error) {
		cfg, err := node.ClientConfig(c, l, machineRoot())
		if err != nil {
			return nil, err
		}
		return kubeclient.New(cfg, kubeclient.EventWrite)
	}, log)
}

// Normal records a Normal Event with reason and the message format makes.
func (r *Recorder) Normal(ctx context.Context, reason, format string, args ...any) error {
	return r.Record(ctx, corev1.EventTypeNormal, reason, fmt.Sprintf(format, args...))
}

// Warning records a Warning Event.
func (r *Recorder) Warning(ctx context.Context, reason, format string, args ...any) error {
	return r.Record(ctx, corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...))
}

// Record records one Event, or counts it on an earlier identical one, or
// drops it when the rate limit says so. A failure is logged and returned
// for callers that must know (most ignore it: an Event is never the
// failure of what it is about).
func (r *Recorder) Record(ctx context.Context, eventType, reason, message string) error {
	if r == nil {
		return nil
	}
	err := r.record(ctx, eventType, reason, message)
	if err != nil {
		r.log.Warn("could not record an Event on the Node", "node", r.nodeName, "reason", reason, "error", err)
	}
	return err
}

func (r *Recorder) record(ctx context.Context, eventType, reason, message string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := metav1.NewTime(r.now())
	// As the kubelet refers to its Node: the name is the UID, which
	// `kubectl describe node` and the field selectors match.
	ref := corev1.ObjectReference{Kind: "Node", Name: r.nodeName, UID: types.UID(r.nodeName)}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", r.nodeName, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventType,
		Source:              corev1.EventSource{Component: Component, Host: r.nodeName},
		ReportingController: Component,
		ReportingInstance:   r.nodeName,
	}
	res, err := r.correlator.EventCorrelate(ev)
	if err != nil {
		return err
	}
	if res.Skip {
		r.log.Debug("Event dropped by the rate limit", "reason", reason)
		return nil
	}
	cs, err := r.client()
	if err != nil {
		return fmt.Errorf("the node's credential: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := res.Event
	api := cs.CoreV1().Events(out.Namespace)
	var got *corev1.Event
	patched := false
	if out.Count > 1 && len(res.Patch) > 0 {
		// A repeat: count it on the Event already there, unless that is
		// gone (expired), then it is created again.
		got, err = api.Patch(ctx, out.Name, types.StrategicMergePatchType, res.Patch, metav1.PatchOptions{})
		patched = !apierrors.IsNotFound(err)
	}
	if !patched {
		out.ResourceVersion = ""
		got, err = api.Create(ctx, out, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	r.correlator.UpdateState(got)
	return nil
}

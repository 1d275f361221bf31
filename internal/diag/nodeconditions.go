package diag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/preflight"
)

// leaseGrace is how long the Node's lease may go unrenewed before the
// cluster marks the Node NotReady (node-monitor-grace-period).
const leaseGrace = 40 * time.Second

// checkNodeConditions: the Node as the cluster sees it: Ready, no
// pressure, its lease renewed, and no taint the node did not register
// with.
func checkNodeConditions(e *Env) preflight.Check {
	return preflight.NewCheck(NameNodeConditions, "the Node object", func(ctx context.Context) preflight.Result {
		p := e.apiServer(ctx)
		if p.node == nil {
			return preflight.Warning("see api-server", "the Node %s was not read: %v", e.nodeName(), orErr(p.nodeErr, p.credErr))
		}
		n := p.node
		logs := "see the kubelet's log: " + e.unitHint("kubelet.service")
		var errs, warns, seen []string
		for _, c := range n.Status.Conditions {
			switch {
			case c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue:
				errs = append(errs, fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message))
			case c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue:
				errs = append(errs, fmt.Sprintf("NetworkUnavailable (%s)", c.Message))
			case c.Type != corev1.NodeReady && c.Status == corev1.ConditionTrue:
				warns = append(warns, fmt.Sprintf("%s (%s)", c.Type, c.Message))
			}
			if c.Type == corev1.NodeReady {
				seen = append(seen, "Ready="+string(c.Status))
			}
		}
		if len(seen) == 0 {
			errs = append(errs, "no Ready condition yet")
		}
		if l := p.lease; l != nil && l.Spec.RenewTime != nil {
			if age := e.now().Sub(l.Spec.RenewTime.Time); age > leaseGrace {
				errs = append(errs, fmt.Sprintf("lease last renewed %s ago", age.Round(time.Second)))
			}
		}
		if t := unexpectedTaints(e, n.Spec.Taints); len(t) > 0 {
			warns = append(warns, "tainted "+strings.Join(t, ", "))
		}
		if n.Spec.Unschedulable {
			warns = append(warns, "cordoned (unschedulable)")
		}
		switch {
		case len(errs) > 0:
			return preflight.Error(logs, "Node %s: %s", n.Name, strings.Join(append(errs, warns...), "; "))
		case len(warns) > 0:
			return preflight.Warning("the cluster or the kubelet set these; "+logs+" and kubectl describe node "+n.Name, "Node %s: %s", n.Name, strings.Join(warns, "; "))
		}
		return preflight.OK("Node %s: %s, no pressure, taints %s, pod CIDR %s", n.Name, strings.Join(seen, ","), taintList(n.Spec.Taints), orUnknown(strings.Join(n.Spec.PodCIDRs, ",")))
	})
}

func orErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return fmt.Errorf("no answer")
}

// unexpectedTaints are the NoSchedule and NoExecute taints the kubelet
// did not register the node with (node.taints): the cluster's verdicts,
// such as not-ready, unreachable or disk-pressure.
func unexpectedTaints(e *Env, taints []corev1.Taint) []string {
	var registered []corev1.Taint
	if kc := e.kubeletConfig().config; kc != nil {
		registered = kc.RegisterWithTaints
	}
	var out []string
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if slices.ContainsFunc(registered, func(r corev1.Taint) bool { return r.MatchTaint(&t) }) {
			continue
		}
		out = append(out, t.ToString())
	}
	return out
}

func taintList(taints []corev1.Taint) string {
	if len(taints) == 0 {
		return "none"
	}
	s := make([]string, len(taints))
	for i, t := range taints {
		s[i] = t.ToString()
	}
	return strings.Join(s, ",")
}

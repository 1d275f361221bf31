package machineapi

import (
	"errors"
	"strings"
	"testing"
)

func goalMachine(edit func(k *KubernetesProfile)) *Machine {
	k := &KubernetesProfile{OrchestratorVersion: "1.35.0", CurrentOrchestratorVersion: "1.35.0", MaxPods: i32(110),
		NodeLabels: map[string]string{"site": "a"}, NodeTaints: []string{"x=y:NoSchedule", "a=b:NoExecute"},
		KubeletConfig: &KubeletConfig{ImageGcHighThreshold: i32(85), ImageGcLowThreshold: i32(80)}}
	if edit != nil {
		edit(k)
	}
	return &Machine{Properties: &MachineProperties{Kubernetes: k, ETag: "e2", ProvisioningState: StateSucceeded}}
}

func TestDecideIsUpstreamsTable(t *testing.T) {
	applied := Applied{ETag: "e1", Settings: Settings{Version: "1.35.0", MaxPods: 110, Labels: map[string]string{"site": "a"},
		Taints: []string{"a=b:NoExecute", "x=y:NoSchedule"}, ImageGCHighThreshold: 85, ImageGCLowThreshold: 80}}
	cases := []struct {
		name    string
		obs     Observed
		action  Action
		etag    string
		reason  string
		version string
	}{
		{"applied, taint order aside", Observed{Machine: goalMachine(nil), NodeExists: true}, ActionNone, "e2", "adopting the Machine's eTag", "1.35.0"},
		{"labels changed", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.NodeLabels = map[string]string{"site": "b"} }), NodeExists: true}, ActionApplyInPlace, "e2", "labels changed", "1.35.0"},
		{"taints changed", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.NodeTaints = []string{} }), NodeExists: true}, ActionApplyInPlace, "e2", "taints changed", "1.35.0"},
		{"labels and taints", Observed{Machine: goalMachine(func(k *KubernetesProfile) {
			k.NodeLabels = map[string]string{}
			k.NodeTaints = []string{"n=m:NoSchedule"}
		}), NodeExists: true}, ActionApplyInPlace, "e2", "labels and taints changed", "1.35.0"},
		{"version, Node there", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.OrchestratorVersion = "1.35.2" }), NodeExists: true}, ActionWaitForNodeDeletion, "", "the Kubernetes version (1.35.0 -> 1.35.2) changed; waiting for AKS", "1.35.0"},
		{"version, Node gone", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.OrchestratorVersion = "1.35.2" })}, ActionRepave, "e2", "repaving to the goal", "1.35.2"},
		{"maxPods, Node gone", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.MaxPods = i32(30) })}, ActionRepave, "e2", "maxPods (110 -> 30)", "1.35.0"},
		{"image GC, Node there", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.KubeletConfig.ImageGcHighThreshold = i32(90) }), NodeExists: true}, ActionWaitForNodeDeletion, "", "image-GC thresholds (85/80 -> 90/80)", "1.35.0"},
		{"major.minor follows current", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.OrchestratorVersion, k.CurrentOrchestratorVersion = "1.36", "1.36.1" })}, ActionRepave, "e2", "1.35.0 -> 1.36.1", "1.36.1"},
		{"major.minor of the running version", Observed{Machine: goalMachine(func(k *KubernetesProfile) { k.OrchestratorVersion, k.CurrentOrchestratorVersion = "1.35", "" }), NodeExists: true}, ActionNone, "e2", "the goal is applied", "1.35.0"},
		{"fields unset keep the file's", Observed{Machine: goalMachine(func(k *KubernetesProfile) {
			k.MaxPods, k.KubeletConfig, k.NodeLabels, k.NodeTaints = nil, nil, nil, nil
		}), NodeExists: true}, ActionNone, "e2", "the goal is applied", "1.35.0"},
		{"machine gone, tainted", Observed{NodeExists: true, NodeDeletionTaint: true}, ActionReset, "", "deletion taint", ""},
		{"machine gone, no taint", Observed{NodeExists: true}, ActionWaitForDeletionTaint, "", "waiting for the Node's deletion taint", "1.35.0"},
		{"ARM erroring", Observed{ARMError: errors.New("GET x: 503 Service Unavailable"), NodeExists: true}, ActionHold, "", "the AKS Machine could not be read: GET x: 503", "1.35.0"},
		{"operation running", Observed{Machine: func() *Machine {
			m := goalMachine(func(k *KubernetesProfile) { k.OrchestratorVersion = "1.36.0" })
			m.Properties.ProvisioningState = "Updating"
			return m
		}()}, ActionHold, "", "is Updating", "1.35.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(applied, c.obs)
			if d.Action != c.action || d.ETag != c.etag || !strings.Contains(d.Reason, c.reason) || d.Goal.Version != c.version {
				t.Errorf("got %+v\nwant action %s eTag %q reason ~%q version %q", d, c.action, c.etag, c.reason, c.version)
			}
			if line := d.String(); strings.Contains(line, "\n") || !strings.HasPrefix(line, "machine-goal decision="+string(c.action)) {
				t.Errorf("log line %q", line)
			}
		})
	}
}

// Deciding never changes what it was given.
func TestDecideDoesNotAliasItsInputs(t *testing.T) {
	applied := Applied{Settings: Settings{Version: "1.35.0", Labels: map[string]string{"a": "1"}, Taints: []string{"t=v:NoSchedule"}}}
	m := goalMachine(nil)
	d := Decide(applied, Observed{Machine: m, NodeExists: true})
	d.Goal.Labels["x"] = "y"
	d.Goal.Taints[0] = "changed"
	if m.Properties.Kubernetes.NodeLabels["x"] != "" || m.Properties.Kubernetes.NodeTaints[0] == "changed" || applied.Labels["x"] != "" {
		t.Error("the decision's goal aliases its inputs")
	}
}

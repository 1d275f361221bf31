package machineapi

import (
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

// NodeRestriction's rule for the labels a node sets on itself.
func TestNodeMaySetLabel(t *testing.T) {
	for key, want := range map[string]bool{
		"team":                                  true,
		"kubernetes.azure.com/agentpool":        true,
		"example.com/tier":                      true,
		"node.kubernetes.io/instance-type":      true,
		"kubelet.kubernetes.io/x":               true,
		"sub.node.kubernetes.io/x":              true,
		"kubernetes.io/hostname":                true,
		"topology.kubernetes.io/zone":           true,
		"node-role.kubernetes.io/worker":        false,
		"kubernetes.io/role":                    false,
		"k8s.io/x":                              false,
		"x.k8s.io/y":                            false,
		"node-restriction.kubernetes.io/pool":   false,
		"a.node-restriction.kubernetes.io/pool": false,
	} {
		if got := NodeMaySetLabel(key); got != want {
			t.Errorf("NodeMaySetLabel(%q) = %v, want %v", key, got, want)
		}
	}
}

// The goal over a config: the Machine's fields win, labels a node may
// not set stay off the kubelet, and the config is not changed.
func TestSettingsOverlay(t *testing.T) {
	c := &config.Config{}
	c.Components.Kubernetes = "1.35.0"
	c.Node.MaxPods = 110
	c.Node.Labels = map[string]string{"from": "file"}
	c.Node.Kubelet.ImageGCHighThreshold, c.Node.Kubelet.ImageGCLowThreshold = 85, 80
	s := Settings{Version: "1.35.1", MaxPods: 50, Labels: map[string]string{"team": "blue", "node-role.kubernetes.io/gpu": ""},
		Taints: []string{"gpu=true:NoSchedule"}, ImageGCHighThreshold: 90, ImageGCLowThreshold: 70}
	got := s.Overlay(c)
	if got.Components.Kubernetes != "1.35.1" || got.Node.MaxPods != 50 || len(got.Node.Labels) != 1 || got.Node.Labels["team"] != "blue" ||
		len(got.Node.Taints) != 1 || got.Node.Kubelet.ImageGCHighThreshold != 90 || got.Node.Kubelet.ImageGCLowThreshold != 70 {
		t.Errorf("overlay: %+v %+v", got.Node, got.Components)
	}
	if c.Components.Kubernetes != "1.35.0" || c.Node.Labels["from"] != "file" || c.Node.MaxPods != 110 || c.Node.Kubelet.ImageGCHighThreshold != 85 {
		t.Errorf("the config changed: %+v", c.Node)
	}
	if back := SettingsFromConfig(c); back.Version != "1.35.0" || back.MaxPods != 110 || back.ImageGCHighThreshold != 85 {
		t.Errorf("SettingsFromConfig: %+v", back)
	}
}

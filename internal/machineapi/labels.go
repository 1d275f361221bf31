package machineapi

import "strings"

// kubeletLabels are the labels in the kubernetes.io and k8s.io domains
// the kubelet sets on its own Node, which NodeRestriction lets a node
// set on itself.
var kubeletLabels = map[string]bool{
	"kubernetes.io/hostname": true, "kubernetes.io/arch": true, "kubernetes.io/os": true,
	"beta.kubernetes.io/instance-type": true, "beta.kubernetes.io/arch": true, "beta.kubernetes.io/os": true,
	"failure-domain.beta.kubernetes.io/zone": true, "failure-domain.beta.kubernetes.io/region": true,
	"topology.kubernetes.io/zone": true, "topology.kubernetes.io/region": true,
}

// NodeMaySetLabel says whether NodeRestriction lets a node set label key
// on its own Node (and the kubelet accepts it in --node-labels): any
// label outside the kubernetes.io and k8s.io domains, those under
// kubelet.kubernetes.io and node.kubernetes.io and the kubelet's own,
// never one under node-restriction.kubernetes.io. Goal labels outside
// this are AKS's to set; the node leaves them alone.
func NodeMaySetLabel(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	under := func(d string) bool { return domain == d || strings.HasSuffix(domain, "."+d) }
	switch {
	case under("node-restriction.kubernetes.io"):
		return false
	case !under("kubernetes.io") && !under("k8s.io"):
		return true
	case under("kubelet.kubernetes.io"), under("node.kubernetes.io"):
		return true
	}
	return kubeletLabels[key]
}

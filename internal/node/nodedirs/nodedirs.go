// Package nodedirs owns the directories inside a machine that the node's
// binaries and image archives are installed into. It belongs to
// internal/node, whose units and configs name them; it is a package of its
// own so that internal/artifact, which installs into them, need not import
// node and with it the Kubernetes libraries node renders with.
package nodedirs

const (
	// Bin holds kubelet, kubectl, crictl and containerd's binaries.
	Bin = "/usr/local/bin"
	// Sbin holds runc.
	Sbin = "/usr/local/sbin"
	// CNIBin holds the CNI plugins.
	CNIBin = "/opt/cni/bin"
	// ImageArchives holds the image archives node.ImportImages loads into
	// containerd (inside the machine, not the host's state dir).
	ImageArchives = "/var/lib/aks-flex-node/images"
)

package node

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Options are the node settings that do not come from the config file:
// facts about the host that the caller detects, and tuning knobs whose
// defaults suit production. The zero value is the production default for
// every field except CgroupV1, which the caller must set from detection.
type Options struct {
	// CgroupV1 says the host (and so the machine, whose cgroup mode must
	// match it) runs the legacy or hybrid cgroup v1 hierarchy. It selects
	// the cgroup remount unit and the kubelet's failCgroupV1 default.
	CgroupV1 bool

	// CgroupDriver is the kubelet cgroupDriver and, through SystemdCgroup,
	// the runc driver in containerd: "cgroupfs" (default) or "systemd".
	// cgroupfs is the default because containerd 1.6 (Debian's) has no
	// RuntimeConfig RPC, so the kubelet cannot ask the runtime and uses its
	// own setting; both sides must agree. "systemd" additionally needs the
	// machine's systemd to own a writable cgroup tree for kubepods.
	CgroupDriver string

	// RestrictOOMScoreAdj sets containerd's CRI restrict_oom_score_adj,
	// which clamps container oom_score_adj to containerd's own. It is
	// needed where the process tree lacks CAP_SYS_RESOURCE (runc cannot
	// lower oom_score_adj there and fails with "can't get final child's
	// PID from pipe"). Default false; DetectRestrictOOMScoreAdj tells.
	RestrictOOMScoreAdj bool

	// FailCgroupV1 is the kubelet's failCgroupV1. Nil means false on a
	// cgroup v1 host (Kubernetes 1.35 refuses to start on v1 otherwise)
	// and unset, i.e. the kubelet's default true, on cgroup v2.
	FailCgroupV1 *bool

	// PodCIDR is the host-local IPAM range of the fallback bridge CNI;
	// empty takes networking.podCIDR. Without a CNI provided by the
	// cluster the bridge is all pods have, and then every node needs its
	// own range: the same range on two nodes gives pods duplicate
	// addresses. So there is no default: when neither is set, Render
	// leaves the CNI config out and start writes it (WriteCNIConfig) from
	// the Node's spec.podCIDR, which the controller manager allocates
	// once the node has registered.
	PodCIDR string

	// ClusterDomain is the kubelet clusterDomain. Default cluster.local.
	ClusterDomain string

	// NodeIP overrides node.kubelet.nodeIP from the config (--node-ip).
	NodeIP string

	// ContainerdLimitNOFILE and ContainerdLimitNPROC are containerd's
	// LimitNOFILE and LimitNPROC. They are set explicitly because inside
	// the machine the inherited limits are whatever nspawn got, which is
	// too low for a node. Defaults 1048576 and "infinity".
	ContainerdLimitNOFILE int
	ContainerdLimitNPROC  string

	// KubeProxyMode is the agent's kube-proxy's mode when
	// networking.kubeProxyMode leaves it to the host
	// (DetectKubeProxyMode); empty means iptables.
	KubeProxyMode string
}

// Defaults of the Options knobs.
const (
	DefaultCgroupDriver          = "cgroupfs"
	DefaultClusterDomain         = "cluster.local"
	DefaultContainerdLimitNOFILE = 1048576
	DefaultContainerdLimitNPROC  = "infinity"
)

var (
	nprocRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(infinity|[1-9][0-9]{0,9})$`) })
	domainRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	})
)

// withDefaults returns o with every unset knob at its default, checked.
func (o Options) withDefaults() (Options, error) {
	if o.CgroupDriver == "" {
		o.CgroupDriver = DefaultCgroupDriver
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.ContainerdLimitNOFILE == 0 {
		o.ContainerdLimitNOFILE = DefaultContainerdLimitNOFILE
	}
	if o.ContainerdLimitNPROC == "" {
		o.ContainerdLimitNPROC = DefaultContainerdLimitNPROC
	}
	if o.FailCgroupV1 == nil && o.CgroupV1 {
		f := false
		o.FailCgroupV1 = &f
	}

	if o.CgroupDriver != "cgroupfs" && o.CgroupDriver != "systemd" {
		return o, fmt.Errorf("cgroup driver %q: must be cgroupfs or systemd", o.CgroupDriver)
	}
	if o.PodCIDR != "" {
		_, ipnet, err := net.ParseCIDR(o.PodCIDR)
		if err != nil {
			return o, fmt.Errorf("pod CIDR %q: not a CIDR such as 10.244.3.0/24", o.PodCIDR)
		}
		o.PodCIDR = ipnet.String()
	}
	if len(o.ClusterDomain) > 253 || !domainRE().MatchString(o.ClusterDomain) {
		return o, fmt.Errorf("cluster domain %q: not a lowercase DNS name", o.ClusterDomain)
	}
	if o.NodeIP != "" && net.ParseIP(o.NodeIP) == nil {
		return o, fmt.Errorf("node IP %q: not an IP address", o.NodeIP)
	}
	if err := checkKubeProxyMode(o.KubeProxyMode); err != nil {
		return o, err
	}
	if o.ContainerdLimitNOFILE < 0 {
		return o, fmt.Errorf("containerd LimitNOFILE %d: must be positive", o.ContainerdLimitNOFILE)
	}
	if !nprocRE().MatchString(o.ContainerdLimitNPROC) {
		return o, fmt.Errorf("containerd LimitNPROC %q: must be a positive number or infinity", o.ContainerdLimitNPROC)
	}
	return o, nil
}

// capSysResource is CAP_SYS_RESOURCE's bit in the capability sets.
const capSysResource = 24

// procSelfStatus is read by DetectRestrictOOMScoreAdj; a variable so tests
// can point it at a fixture.
var procSelfStatus = "/proc/self/status"

// DetectRestrictOOMScoreAdj reports whether containerd inside a machine
// started from this host should run with restrict_oom_score_adj: true when
// this process's effective capabilities lack CAP_SYS_RESOURCE. A process
// tree without it cannot give it to the machine, and runc there cannot
// lower a container's oom_score_adj. It reads /proc/self/status rather than
// trying to lower oom_score_adj, which would change this process. When the
// status cannot be read it answers false, the production default.
func DetectRestrictOOMScoreAdj() bool {
	data, err := os.ReadFile(procSelfStatus)
	if err != nil {
		return false
	}
	has, ok := hasCapability(data, "CapEff", capSysResource)
	return ok && !has
}

// hasCapability reads capability bit from the hex mask on line field of a
// /proc/<pid>/status; ok is false when the line is missing or malformed.
func hasCapability(status []byte, field string, bit uint) (has, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, found := strings.Cut(sc.Text(), ":")
		if !found || name != field {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return false, false
		}
		return mask&(1<<bit) != 0, true
	}
	return false, false
}

// HostOptions are the options that come from the host rather than the
// config, for a host in cgroupMode ("v1" or "v2"): what start renders
// with, and so what the agent's drift repair renders with to restore.
func HostOptions(cgroupMode string) Options {
	return Options{CgroupV1: cgroupMode != "v2", RestrictOOMScoreAdj: DetectRestrictOOMScoreAdj(), KubeProxyMode: DetectKubeProxyMode()}
}

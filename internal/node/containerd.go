package node

import (
	"bytes"
	"fmt"

	"github.com/pelletier/go-toml/v2"
)

// containerd's config.toml, version 2 schema: containerd 1.6 and 1.7 read
// it, and 2.x still migrates it on load. Only what differs from the
// defaults, or what the kubelet and this package must agree on, is set.
type containerdConfig struct {
	Version int              `toml:"version"`
	GRPC    containerdGRPC   `toml:"grpc"`
	Plugins containerdPlugin `toml:"plugins"`
}

type containerdGRPC struct {
	Address string `toml:"address"`
}

type containerdPlugin struct {
	CRI criConfig `toml:"io.containerd.grpc.v1.cri"`
}

type criConfig struct {
	SandboxImage        string        `toml:"sandbox_image"`
	RestrictOOMScoreAdj bool          `toml:"restrict_oom_score_adj"`
	Containerd          criContainerd `toml:"containerd"`
	CNI                 criCNI        `toml:"cni"`
}

type criContainerd struct {
	DefaultRuntimeName string                `toml:"default_runtime_name"`
	Runtimes           map[string]criRuntime `toml:"runtimes"`
}

type criRuntime struct {
	RuntimeType string      `toml:"runtime_type"`
	Options     runcOptions `toml:"options"`
}

type runcOptions struct {
	BinaryName    string `toml:"BinaryName"`
	SystemdCgroup bool   `toml:"SystemdCgroup"`
}

type criCNI struct {
	BinDir  string `toml:"bin_dir"`
	ConfDir string `toml:"conf_dir"`
}

func renderContainerdConfig(in *inputs) ([]byte, error) {
	cfg := containerdConfig{
		Version: 2,
		GRPC:    containerdGRPC{Address: ContainerdSocket},
		Plugins: containerdPlugin{CRI: criConfig{
			SandboxImage:        in.sandbox,
			RestrictOOMScoreAdj: in.o.RestrictOOMScoreAdj,
			Containerd: criContainerd{
				DefaultRuntimeName: "runc",
				Runtimes: map[string]criRuntime{"runc": {
					RuntimeType: "io.containerd.runc.v2",
					Options: runcOptions{
						BinaryName:    RuncBinary,
						SystemdCgroup: in.o.CgroupDriver == "systemd",
					},
				}},
			},
			CNI: criCNI{BinDir: CNIBinDir, ConfDir: CNIConfDir},
		}},
	}
	var b bytes.Buffer
	b.WriteString("# Written by aks-flex-node; changes are overwritten.\n")
	if err := toml.NewEncoder(&b).SetIndentTables(true).Encode(cfg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func renderContainerdUnit(in *inputs) ([]byte, error) {
	after, wants := "network.target local-fs.target", ""
	if in.o.CgroupV1 {
		after += " " + CgroupRWUnitName
		wants = "Wants=" + CgroupRWUnitName + "\n"
	}
	return fmt.Appendf(nil, `# Written by aks-flex-node; changes are overwritten.
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=%s
%s
[Service]
# The overlay module may be built in or already loaded by the host, and a
# machine cannot load modules anyway: a failure here is not fatal.
ExecStartPre=-/sbin/modprobe overlay
ExecStart=%s --config %s
Type=notify
# containerd and its shims manage the cgroups of the containers below
# them; on stop only containerd goes, the shims keep pods running.
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
# Inside the machine the inherited limits are whatever nspawn got.
LimitNOFILE=%d
LimitNPROC=%s
LimitCORE=infinity
TasksMax=infinity
# Upstream uses -999, which needs CAP_SYS_RESOURCE. With
# restrict_oom_score_adj containerd's own score is the floor for every
# container, so it must be one the machine can always hold.
OOMScoreAdjust=0

[Install]
WantedBy=multi-user.target
`, after, wants, ContainerdBinary, ContainerdConfig, in.o.ContainerdLimitNOFILE, in.o.ContainerdLimitNPROC), nil
}

// cgroupRWUnit and cgroupRWScript exist only on cgroup v1 hosts, where
// systemd-nspawn mounts the controller hierarchies read-only inside the
// machine and the kubelet then fails with "mkdir
// /sys/fs/cgroup/cpuset/kubepods: read-only file system".
const cgroupRWUnit = `# Written by aks-flex-node; changes are overwritten.
[Unit]
Description=Make the cgroup v1 hierarchies writable for containerd and the kubelet
DefaultDependencies=no
After=local-fs.target
Before=` + ContainerdUnitName + ` ` + KubeletUnitName + `
ConditionPathIsDirectory=/sys/fs/cgroup

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=` + CgroupRWScript + `

[Install]
WantedBy=multi-user.target
`

// The script remounts read-write every read-only cgroup hierarchy mounted
// directly under /sys/fs/cgroup, and the /sys/fs/cgroup tmpfs itself if it
// is read-only. It reads the mount table once before changing it, and a
// second run finds nothing read-only and does nothing.
const cgroupRWScript = `#!/bin/sh
# Written by aks-flex-node; changes are overwritten.
# systemd-nspawn mounts the cgroup v1 hierarchies read-only in the machine;
# containerd and the kubelet create cgroups there, so make them writable.
set -eu

# /proc/self/mountinfo: id parent major:minor root mountpoint options
# [optional fields...] - fstype source superoptions
read_only_cgroup_mounts() {
	while IFS= read -r line; do
		rest=${line#* * * * }
		mnt=${rest%% *}
		rest=${rest#* }
		opts=${rest%% *}
		fstype=${line#* - }
		fstype=${fstype%% *}
		case ",$opts," in
		*,ro,*) ;;
		*) continue ;;
		esac
		case "$mnt" in
		/sys/fs/cgroup)
			if [ "$fstype" = tmpfs ]; then
				printf '%s\n' "$mnt"
			fi
			;;
		/sys/fs/cgroup/*/*) ;;
		/sys/fs/cgroup/*)
			case "$fstype" in
			cgroup | cgroup2) printf '%s\n' "$mnt" ;;
			esac
			;;
		esac
	done </proc/self/mountinfo
	return 0
}

mounts=$(read_only_cgroup_mounts)
for mnt in $mounts; do
	echo "remounting $mnt read-write"
	mount -o remount,bind,rw "$mnt"
done
`

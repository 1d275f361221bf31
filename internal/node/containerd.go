package node

import (
	"bytes"

	"github.com/pelletier/go-toml/v2"

	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
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
			CNI: criCNI{BinDir: nodedirs.CNIBin, ConfDir: CNIConfDir},
		}},
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).SetIndentTables(true).Encode(cfg); err != nil {
		return nil, err
	}
	return genfile.WithHeader(b.Bytes()), nil
}

func renderContainerdUnit(in *inputs) ([]byte, error) {
	cgroupRW := ""
	if in.o.CgroupV1 {
		cgroupRW = CgroupRWUnitName
	}
	return genfile.Render(genfile.ContainerdUnit, struct {
		CgroupRWUnit, Binary, ConfigFile, LimitNPROC string
		LimitNOFILE                                  int
	}{cgroupRW, ContainerdBinary, ContainerdConfig, in.o.ContainerdLimitNPROC, in.o.ContainerdLimitNOFILE})
}

// renderCgroupRWUnit and renderCgroupRWScript are used only on cgroup v1
// hosts, where systemd-nspawn mounts the controller hierarchies read-only
// inside the machine and the kubelet then fails with "mkdir
// /sys/fs/cgroup/cpuset/kubepods: read-only file system".
func renderCgroupRWUnit(*inputs) ([]byte, error) {
	return genfile.Render(genfile.CgroupRWUnit, struct{ ContainerdUnit, KubeletUnit, Script string }{
		ContainerdUnitName, KubeletUnitName, CgroupRWScript,
	})
}

// renderCgroupRWScript: the script remounts read-write every read-only
// cgroup hierarchy mounted directly under /sys/fs/cgroup, and the
// /sys/fs/cgroup tmpfs itself if it is read-only. It reads the mount table
// once before changing it, and a second run finds nothing read-only and
// does nothing.
func renderCgroupRWScript(*inputs) ([]byte, error) {
	return genfile.Render(genfile.CgroupRWScript, nil)
}

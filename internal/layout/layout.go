package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
)

// Fixed locations. They are deliberately not prefix-relative: units must live
// where systemd looks for them and /etc is writable even when /usr is not;
// configuration and state have their own conventional homes.
const (
	DefaultBinDir   = "/usr/local/bin"
	DefaultLibDir   = "/usr/local/lib/aks-flex-node"
	ConfigFile      = configDir + "/config.json"
	DefaultLogDir   = "/var/log/aks-flex-node"
	BinaryName      = "aks-flex-node"
	AgentUnitName   = "aks-flex-node-agent.service"
	RecoveryUnit    = "aks-flex-node-recovery.service"
	RecoveryTimer   = "aks-flex-node-recovery.timer"
	RecoveryScript  = "aks-flex-node-recovery.sh"
	SlotBlueName    = "agent-blue"
	SlotGreenName   = "agent-green"
	CurrentLinkName = "current"
	LastGoodName    = "last-good"
	// FirstBootUnitName is the unit an Ignition config rendered by
	// `aks-flex-node ignition render` installs to run start once.
	FirstBootUnitName = "aks-flex-node-firstboot.service"
	// JoinedMarkerName is the file under the state dir that a successful
	// start writes last and reset removes; the first-boot unit is
	// conditioned on its absence, so provisioning runs once and a reset host
	// can rejoin.
	JoinedMarkerName = "joined"
	// AgentSocketName is the Unix socket under the state dir on which the
	// agent serves /healthz and /metrics (root only).
	AgentSocketName = "agent.sock"
	// AgentLogName is the agent's log file in the log dir.
	AgentLogName = "agent.log"
	// InstallRecordName is the file under the state dir where install.sh
	// records what it installed, for uninstall.sh (the scripts spell it
	// too; reset keeps it).
	InstallRecordName = "install-record"
	// SuggestedPrefix is the prefix messages recommend on hosts whose /usr
	// is read-only. It is only ever suggested, never applied.
	SuggestedPrefix = "/opt/aks-flex-node"

	// MachineBlue and MachineGreen are the two sides of the node's
	// blue/green pair; MachineBlue is the side a first start provisions.
	MachineBlue  = "kube1"
	MachineGreen = "kube2"
	// MachineDropInName is the drop-in the agent owns for each
	// systemd-nspawn@<machine>.service.
	MachineDropInName = "aks-flex-node.conf"
	// LayerCacheName is the layer cache's directory in the machines dir.
	LayerCacheName = ".aks-flex-node-layers"
)

const (
	configDir      = "/etc/aks-flex-node"
	stateDir       = "/var/lib/aks-flex-node"
	systemdUnitDir = "/etc/systemd/system"
	// machinesDir is where systemd-nspawn and machinectl look for machine
	// images; nspawnDir holds their trusted per-machine settings (only
	// settings files there may grant capabilities and bind mounts).
	machinesDir  = "/var/lib/machines"
	nspawnDir    = "/etc/systemd/nspawn"
	sysctlDropIn = "/etc/sysctl.d/90-aks-flex-node.conf"
	modulesLoad  = "/etc/modules-load.d/aks-flex-node.conf"
)

// ErrNotFromNew is what every consumer of a Layout returns for one that
// layout.New did not make (the zero value): its paths were never derived
// from a validated prefix, so nothing may be rendered from them.
var ErrNotFromNew = errors.New("layout was not made by layout.New")

// Slots are the blue/green upgrade slots and the links that name them.
type Slots struct {
	Blue     string `json:"blue"`
	Green    string `json:"green"`
	Current  string `json:"current"`
	LastGood string `json:"lastGood"`
}

// Units are the absolute paths of the unit files the agent installs.
type Units struct {
	Agent    string `json:"agent"`
	Recovery string `json:"recovery"`
}

// Layout holds host paths as the host sees them (what goes into unit files
// and scripts). Only New makes one, after the prefix rule has passed, so
// every consumer trusts the paths it hands out instead of checking them
// again. Root is where the host's "/" is for this process: "/" on a live
// host, a temp dir in tests or an image tree when baking; OnRoot turns a
// host path into one this process can open.
type Layout struct {
	made       bool
	root       string
	prefix     string
	binDir     string
	libDir     string
	configFile string
	logDir     string
}

// New resolves the layout for a prefix ("" selects the classic /usr/local
// layout) and a log dir ("" selects the default). root "" means "/". This is
// the one place the prefix rule is evaluated on the way to a layout.
// The config file recorded is the conventional one; WithConfigFile names
// another.
func New(root, prefix, logDir string) (Layout, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Layout{}, err
	}
	if root == "" {
		root = "/"
	}
	if logDir == "" {
		logDir = DefaultLogDir
	}
	binDir, libDir := DefaultBinDir, DefaultLibDir
	if prefix != "" {
		binDir, libDir = prefix+"/bin", prefix+"/lib"
	}
	return Layout{
		made:       true,
		root:       filepath.Clean(root),
		prefix:     prefix,
		binDir:     binDir,
		libDir:     libDir,
		configFile: ConfigFile,
		logDir:     logDir,
	}, nil
}

// Check returns ErrNotFromNew for a Layout that New did not make. Renderers
// call it instead of re-running the prefix rule.
func (l Layout) Check() error {
	if !l.made {
		return ErrNotFromNew
	}
	return nil
}

// WithConfigFile is l with another config file. The path is the
// operator's, not derived from the prefix: what interpolates it into a unit
// checks it with ValidateUnitPath.
func (l Layout) WithConfigFile(path string) Layout {
	l.configFile = path
	return l
}

// WithRoot is l on another root (a temp dir, an image tree).
func (l Layout) WithRoot(root string) Layout {
	if root == "" {
		root = "/"
	}
	l.root = filepath.Clean(root)
	return l
}

// Root is where the host's "/" is for this process.
func (l Layout) Root() string { return l.root }

// Prefix is the declared agent.hostPrefix ("" for the classic layout).
func (l Layout) Prefix() string { return l.prefix }

// BinDir holds the agent's CLI path.
func (l Layout) BinDir() string { return l.binDir }

// LibDir holds the upgrade slots, their links and the recovery script.
func (l Layout) LibDir() string { return l.libDir }

// AgentBinary is the CLI path: a link to the current slot once seeded.
func (l Layout) AgentBinary() string { return l.binDir + "/" + BinaryName }

// UpgradeSlots are the blue/green slots and the current/last-good links.
func (l Layout) UpgradeSlots() Slots {
	return Slots{
		Blue:     l.libDir + "/" + SlotBlueName,
		Green:    l.libDir + "/" + SlotGreenName,
		Current:  l.libDir + "/" + CurrentLinkName,
		LastGood: l.libDir + "/" + LastGoodName,
	}
}

// RecoveryScript is the rendered recovery script.
func (l Layout) RecoveryScript() string { return l.libDir + "/" + RecoveryScript }

// SystemdUnitDir is where the agent's units live: /etc, never /usr.
func (l Layout) SystemdUnitDir() string { return systemdUnitDir }

// Units are the agent's and the recovery unit's files.
func (l Layout) Units() Units {
	return Units{Agent: l.unit(AgentUnitName), Recovery: l.unit(RecoveryUnit)}
}

// RecoveryTimerUnit is the recovery timer's unit file.
func (l Layout) RecoveryTimerUnit() string { return l.unit(RecoveryTimer) }

// FirstBootUnit is the host path of the first-boot unit.
func (l Layout) FirstBootUnit() string { return l.unit(FirstBootUnitName) }

func (l Layout) unit(name string) string { return systemdUnitDir + "/" + name }

// ConfigFile is the config file the layout was read from.
func (l Layout) ConfigFile() string { return l.configFile }

// ConfigDir is the conventional config directory.
func (l Layout) ConfigDir() string { return configDir }

// StateDir holds the agent's state: records, stamps, staged bundles.
func (l Layout) StateDir() string { return stateDir }

// LogDir is agent.logDir.
func (l Layout) LogDir() string { return l.logDir }

// JoinedMarker is the host path of the completion marker start writes.
func (l Layout) JoinedMarker() string { return stateDir + "/" + JoinedMarkerName }

// HostNetworkRecord is the host path of what start found of the host's
// network before the node first ran (the nft tables there were), which
// reset reads to remove only what the node added.
func (l Layout) HostNetworkRecord() string { return stateDir + "/host-network.json" }

// MachineRegistration is the host path of what start's AKS Machine
// registration did (internal/machineapi's Record), for status and debug.
func (l Layout) MachineRegistration() string { return stateDir + "/machine-registration.json" }

// MachineGoal is the host path of what the agent's follow-machine loop
// applied from the AKS Machine and decided last (internal/machineapi's
// GoalRecord), for status, debug and the kubelet's rendering.
func (l Layout) MachineGoal() string { return stateDir + "/machine-goal.json" }

// RolloutRecord is the host path of what the agent's follow-rollout loop
// did for the FlexNodeRollout that selects the node (internal/fleet's
// Record): the release it moved the node to, which start keeps (the
// cluster's goal wins for the fields a release sets), and the step in
// flight, which a restarted agent resumes from.
func (l Layout) RolloutRecord() string { return stateDir + "/rollout.json" }

// IdentityDir holds what the kubelet's credential plugin reads inside the
// machine (the identity resolved from the config, its secrets included)
// and the token cache it shares with the host; start binds it into the
// machine.
func (l Layout) IdentityDir() string { return stateDir + "/identity" }

// AgentSocket is the host path of the agent's /healthz and /metrics
// socket.
func (l Layout) AgentSocket() string { return stateDir + "/" + AgentSocketName }

// AgentLog is the host path of the agent's log file in agent.logDir.
func (l Layout) AgentLog() string { return l.logDir + "/" + AgentLogName }

// BundlesDir holds staged bundles (pulled from a registry or downloaded
// from upstream). Never under /usr: on ACL it is read-only, and staged
// bundles are state.
func (l Layout) BundlesDir() string { return stateDir + "/bundles" }

// MachineStateDir holds per-machine records (the image a rootfs came from).
func (l Layout) MachineStateDir() string { return stateDir + "/machines" }

// MachinesDir is where systemd-nspawn and machinectl find machine roots.
func (l Layout) MachinesDir() string { return machinesDir }

// MachineDir is the rootfs of machine name.
func (l Layout) MachineDir(name string) string { return machinesDir + "/" + name }

// LayerCacheDir holds the worker image's layers, unpacked and keyed by
// diff ID, that machine rootfs are made from. It is below the machines
// dir rather than the state dir: a rootfs is made from it with hard links
// (or reflinks), which need the cache and the rootfs on one mount, and
// /var/lib/machines is often a mount of its own. The leading dot keeps it
// out of machinectl list-images.
func (l Layout) LayerCacheDir() string { return machinesDir + "/" + LayerCacheName }

// Machines are the two sides of the blue/green pair, the first-provisioned
// side first.
func (l Layout) Machines() [2]string { return [2]string{MachineBlue, MachineGreen} }

// OtherMachine is the side that is not name.
func (l Layout) OtherMachine(name string) string {
	if name == MachineGreen {
		return MachineBlue
	}
	return MachineGreen
}

// NspawnDir holds the machines' .nspawn settings files.
func (l Layout) NspawnDir() string { return nspawnDir }

// NspawnFile is machine name's .nspawn settings file.
func (l Layout) NspawnFile(name string) string { return nspawnDir + "/" + name + ".nspawn" }

// MachineUnit is the systemd unit that runs machine name.
func MachineUnit(name string) string { return "systemd-nspawn@" + name + ".service" }

// MachineDropIn is the agent's drop-in for machine name's unit.
func (l Layout) MachineDropIn(name string) string {
	return systemdUnitDir + "/" + MachineUnit(name) + ".d/" + MachineDropInName
}

// SysctlDropIn is the sysctl.d file start writes for the node's sysctls.
func (l Layout) SysctlDropIn() string { return sysctlDropIn }

// ModulesLoadFile is the modules-load.d file for the node's kernel modules.
func (l Layout) ModulesLoadFile() string { return modulesLoad }

// OnRoot maps a host path to the path this process opens.
func (l Layout) OnRoot(hostPath string) string {
	if l.root == "" || l.root == "/" {
		return hostPath
	}
	return filepath.Join(l.root, hostPath)
}

// Dirs are the directories the agent creates and owns, in creation order.
func (l Layout) Dirs() []string {
	return []string{l.binDir, l.libDir, stateDir, l.logDir}
}

// view is the public shape of a layout: what `layout --output json` prints.
type view struct {
	Prefix         string `json:"prefix"`
	BinDir         string `json:"binDir"`
	LibDir         string `json:"libDir"`
	AgentBinary    string `json:"agentBinary"`
	UpgradeSlots   Slots  `json:"upgradeSlots"`
	RecoveryScript string `json:"recoveryScript"`
	SystemdUnitDir string `json:"systemdUnitDir"`
	Units          Units  `json:"units"`
	ConfigFile     string `json:"configFile"`
	StateDir       string `json:"stateDir"`
	LogDir         string `json:"logDir"`
}

// MarshalJSON writes the public shape; the root is this process's view and
// not part of it.
func (l Layout) MarshalJSON() ([]byte, error) {
	return json.Marshal(view{
		Prefix: l.prefix, BinDir: l.binDir, LibDir: l.libDir, AgentBinary: l.AgentBinary(),
		UpgradeSlots: l.UpgradeSlots(), RecoveryScript: l.RecoveryScript(), SystemdUnitDir: systemdUnitDir,
		Units: l.Units(), ConfigFile: l.configFile, StateDir: stateDir, LogDir: l.logDir,
	})
}

// Keys maps the stable key names used by `layout --get` to their values.
// The names are the JSON paths, so scripts and JSON readers agree.
func (l Layout) Keys() map[string]string {
	s, u := l.UpgradeSlots(), l.Units()
	return map[string]string{
		"prefix":                l.prefix,
		"binDir":                l.binDir,
		"libDir":                l.libDir,
		"agentBinary":           l.AgentBinary(),
		"upgradeSlots.blue":     s.Blue,
		"upgradeSlots.green":    s.Green,
		"upgradeSlots.current":  s.Current,
		"upgradeSlots.lastGood": s.LastGood,
		"recoveryScript":        l.RecoveryScript(),
		"systemdUnitDir":        systemdUnitDir,
		"units.agent":           u.Agent,
		"units.recovery":        u.Recovery,
		"configFile":            l.configFile,
		"stateDir":              stateDir,
		"logDir":                l.logDir,
	}
}

// KeyOrder is the order keys are printed in text output.
var KeyOrder = []string{
	"prefix", "binDir", "libDir", "agentBinary",
	"upgradeSlots.blue", "upgradeSlots.green", "upgradeSlots.current", "upgradeSlots.lastGood",
	"recoveryScript", "systemdUnitDir", "units.agent", "units.recovery",
	"configFile", "stateDir", "logDir",
}

// Get returns one value by key name.
func (l Layout) Get(key string) (string, error) {
	v, ok := l.Keys()[key]
	if !ok {
		return "", fmt.Errorf("unknown layout key %q (known keys: %v)", key, KeyOrder)
	}
	return v, nil
}

// IsBinDir reports whether dir is a bin dir some valid layout would use:
// the default bin dir, or <valid prefix>/bin. install.sh asks this instead of
// re-implementing the prefix rule.
func IsBinDir(dir string) (prefix string, err error) {
	if dir == DefaultBinDir {
		return "", nil
	}
	if filepath.Base(dir) != "bin" || len(dir) < len("/x/bin") {
		return "", fmt.Errorf("%q is not a layout bin dir: it must be %s or <prefix>/bin", dir, DefaultBinDir)
	}
	prefix = dir[:len(dir)-len("/bin")]
	if err := ValidatePrefix(prefix); err != nil {
		return "", fmt.Errorf("%q is not a layout bin dir: %w", dir, err)
	}
	return prefix, nil
}

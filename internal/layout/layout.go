package layout

import (
	"fmt"
	"path/filepath"
)

// Fixed locations. They are deliberately not prefix-relative: units must live
// where systemd looks for them and /etc is writable even when /usr is not;
// configuration and state have their own conventional homes.
const (
	DefaultBinDir   = "/usr/local/bin"
	DefaultLibDir   = "/usr/local/lib/aks-flex-node"
	SystemdUnitDir  = "/etc/systemd/system"
	ConfigDir       = "/etc/aks-flex-node"
	ConfigFile      = ConfigDir + "/config.json"
	StateDir        = "/var/lib/aks-flex-node"
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
	// JoinedMarkerName is the file under StateDir that a successful start
	// writes last and reset removes; the first-boot unit is conditioned on
	// its absence, so provisioning runs once and a reset host can rejoin.
	JoinedMarkerName = "joined"
)

// JoinedMarker is the host path of the completion marker start writes.
func (l Layout) JoinedMarker() string { return l.StateDir + "/" + JoinedMarkerName }

// FirstBootUnit is the host path of the first-boot unit.
func (l Layout) FirstBootUnit() string { return l.SystemdUnitDir + "/" + FirstBootUnitName }

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
// and scripts). Root is where the host's "/" is for this process: "/" on a
// live host, a temp dir in tests or an image tree when baking. Use OnRoot to
// turn a host path into one this process can open.
type Layout struct {
	Root           string `json:"-"`
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

// New resolves the layout for a prefix ("" selects the classic /usr/local
// layout) and a log dir ("" selects the default). root "" means "/".
// The config file recorded is the conventional one; callers that loaded a
// different file set ConfigFile themselves.
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
		Root:        filepath.Clean(root),
		Prefix:      prefix,
		BinDir:      binDir,
		LibDir:      libDir,
		AgentBinary: binDir + "/" + BinaryName,
		UpgradeSlots: Slots{
			Blue:     libDir + "/" + SlotBlueName,
			Green:    libDir + "/" + SlotGreenName,
			Current:  libDir + "/" + CurrentLinkName,
			LastGood: libDir + "/" + LastGoodName,
		},
		RecoveryScript: libDir + "/" + RecoveryScript,
		SystemdUnitDir: SystemdUnitDir,
		Units: Units{
			Agent:    SystemdUnitDir + "/" + AgentUnitName,
			Recovery: SystemdUnitDir + "/" + RecoveryUnit,
		},
		ConfigFile: ConfigFile,
		StateDir:   StateDir,
		LogDir:     logDir,
	}, nil
}

// OnRoot maps a host path to the path this process opens.
func (l Layout) OnRoot(hostPath string) string {
	if l.Root == "" || l.Root == "/" {
		return hostPath
	}
	return filepath.Join(l.Root, hostPath)
}

// Dirs are the directories the agent creates and owns, in creation order.
func (l Layout) Dirs() []string {
	return []string{l.BinDir, l.LibDir, l.StateDir, l.LogDir}
}

// Keys maps the stable key names used by `layout --get` to their values.
// The names are the JSON paths, so scripts and JSON readers agree.
func (l Layout) Keys() map[string]string {
	return map[string]string{
		"prefix":                l.Prefix,
		"binDir":                l.BinDir,
		"libDir":                l.LibDir,
		"agentBinary":           l.AgentBinary,
		"upgradeSlots.blue":     l.UpgradeSlots.Blue,
		"upgradeSlots.green":    l.UpgradeSlots.Green,
		"upgradeSlots.current":  l.UpgradeSlots.Current,
		"upgradeSlots.lastGood": l.UpgradeSlots.LastGood,
		"recoveryScript":        l.RecoveryScript,
		"systemdUnitDir":        l.SystemdUnitDir,
		"units.agent":           l.Units.Agent,
		"units.recovery":        l.Units.Recovery,
		"configFile":            l.ConfigFile,
		"stateDir":              l.StateDir,
		"logDir":                l.LogDir,
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

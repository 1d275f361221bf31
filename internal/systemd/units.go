// Package systemd owns the two host units that run aks-flex-node itself,
// the agent's and Ignition's first-boot unit (which values go into them;
// their text is in internal/genfile), installing the agent unit, and the
// systemctl calls that load, enable, start and stop units on the host or,
// offline, under a root tree.
//
// Other units have their own owners: the recovery unit and timer belong to
// internal/agentupgrade, the machine's .nspawn file and drop-in to
// internal/machine, the units inside the machine to internal/node.
package systemd

import (
	"fmt"

	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// AgentUnit renders aks-flex-node-agent.service for a layout. It runs the
// `current` upgrade link, so an upgrade is one rename plus a restart, and
// hands failures to the recovery unit (see internal/agentupgrade). The paths are
// interpolated unquoted; that is safe only because layout.New (and
// WithConfigFile) admit no byte systemd treats specially.
func AgentUnit(l layout.Layout) (string, error) {
	if err := checkLayout(l, layout.AgentUnitName); err != nil {
		return "", err
	}
	return render(layout.AgentUnitName, genfile.AgentUnit, struct {
		RecoveryUnit, Current, ConfigFile, RecoveryScript string
	}{layout.RecoveryUnit, l.UpgradeSlots().Current, l.ConfigFile(), l.RecoveryScript()})
}

// FirstBootUnit renders aks-flex-node-firstboot.service: the unit an
// Ignition config installs so that the host joins on its first boot with no
// one logged in. It runs start once: start writes the layout's joined marker
// last, and the unit is conditioned on the marker's absence, so later boots
// skip it and a reset (which removes the marker) re-arms it.
func FirstBootUnit(l layout.Layout) (string, error) {
	if err := checkLayout(l, layout.FirstBootUnitName); err != nil {
		return "", err
	}
	return render(layout.FirstBootUnitName, genfile.FirstBootUnit, struct {
		JoinedMarker, AgentBinary, ConfigFile string
	}{l.JoinedMarker(), l.AgentBinary(), l.ConfigFile()})
}

// checkLayout refuses a Layout layout.New did not make, and a config path
// (which WithConfigFile sets apart from New) systemd would split or expand.
func checkLayout(l layout.Layout, unit string) error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("render %s: %w", unit, err)
	}
	if err := layout.ValidateUnitPath(l.ConfigFile()); err != nil {
		return fmt.Errorf("render %s: config path: %w", unit, err)
	}
	return nil
}

func render(unit string, n genfile.Name, data any) (string, error) {
	b, err := genfile.Render(n, data)
	if err != nil {
		return "", fmt.Errorf("render %s: %w", unit, err)
	}
	return string(b), nil
}

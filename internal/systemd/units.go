// Package systemd owns the unit files aks-flex-node installs and the calls
// to systemctl that load, enable, start and stop them.
package systemd

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// AgentUnit renders aks-flex-node-agent.service for a layout. It runs the
// `current` upgrade link, so an upgrade is one rename plus a restart, and
// hands failures to the recovery unit (see internal/upgrade). The paths are
// interpolated unquoted; that is safe only because layout.New (and
// WithConfigFile) admit no byte systemd treats specially.
func AgentUnit(l layout.Layout) (string, error) {
	if err := l.Check(); err != nil {
		return "", fmt.Errorf("render %s: %w", layout.AgentUnitName, err)
	}
	if err := layout.ValidateUnitPath(l.ConfigFile()); err != nil {
		return "", fmt.Errorf("render %s: config path: %w", layout.AgentUnitName, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by aks-flex-node; changes are overwritten.
[Unit]
Description=AKS Flex Node agent
Documentation=https://github.com/Azure/aks-flex-node
After=network-online.target
Wants=network-online.target
# Five failed starts in ten minutes stop the restart loop: by then a human
# (or the recovery unit) has to look, and hammering the host helps nobody.
StartLimitIntervalSec=600
StartLimitBurst=5
# A unit that gives up is handed to recovery, which puts current back on
# last-good when an upgrade is in flight.
OnFailure=%s

[Service]
Type=simple
ExecStart=%s agent --config %s
# The executable is the "current" link; name the journal lines after the
# product instead.
SyslogIdentifier=aks-flex-node
# During an upgrade a failed stop (crash, non-zero exit) starts recovery at
# once instead of after the restart loop gives up; otherwise it does nothing.
ExecStopPost=-%s agent-stopped
Restart=on-failure
RestartSec=5s
# Exit code 2 is invalid input (a bad config): restarting cannot fix it.
RestartPreventExitStatus=2
TimeoutStopSec=30s

[Install]
WantedBy=multi-user.target
`, layout.RecoveryUnit, l.UpgradeSlots().Current, l.ConfigFile(), l.RecoveryScript())
	return b.String(), nil
}

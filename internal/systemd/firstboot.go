package systemd

import (
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// FirstBootUnit renders aks-flex-node-firstboot.service: the unit an
// Ignition config installs so that the host joins on its first boot with no
// one logged in. It runs start once: start writes the layout's joined marker
// last, and the unit is conditioned on the marker's absence, so later boots
// skip it and a reset (which removes the marker) re-arms it.
//
// Paths are interpolated unquoted, which is safe only because layout.New
// admitted no byte systemd treats specially.
func FirstBootUnit(l layout.Layout) (string, error) {
	if err := l.Check(); err != nil {
		return "", fmt.Errorf("render %s: %w", layout.FirstBootUnitName, err)
	}
	if err := layout.ValidateUnitPath(l.ConfigFile()); err != nil {
		return "", fmt.Errorf("render %s: config path: %w", layout.FirstBootUnitName, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by Ignition from a config rendered by "aks-flex-node ignition render".
# Joins this host once, on first boot; start writes %[1]s when the node is
# Ready, and "aks-flex-node reset" removes it again.
[Unit]
Description=AKS Flex Node first-boot join
Documentation=https://github.com/Azure/aks-flex-node
Wants=network-online.target
After=network-online.target
ConditionPathExists=!%[1]s
# After uninstall.sh (or with the binary gone for any reason) there is
# nothing to run: skip, rather than fail and retry every 30 s for ever.
ConditionFileIsExecutable=%[2]s
# Keep retrying a failed join (a network that comes up late, an API server
# not reachable yet): nobody is there to start it again by hand.
StartLimitIntervalSec=0

[Service]
Type=oneshot
ExecStart=%[2]s start --config %[3]s
Restart=on-failure
RestartSec=30s
# Exit code 2 is invalid input (a bad config): retrying cannot fix it.
RestartPreventExitStatus=2
# start bounds its own waits (preflight, provisioning, the join timeout).
TimeoutStartSec=20min

[Install]
WantedBy=multi-user.target
`, l.JoinedMarker(), l.AgentBinary(), l.ConfigFile())
	return b.String(), nil
}

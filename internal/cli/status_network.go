package cli

import (
	"fmt"
	"io"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// nodeNetwork is what status says of the node's pod network, read from
// this host alone: the mode the config names, the network config
// containerd loads in the active machine, and, without one, what the
// node waits for (it is not Ready until then).
type nodeNetwork struct {
	Mode      string `json:"mode,omitempty"`
	Machine   string `json:"machine,omitempty"`
	CNIConfig string `json:"cniConfig,omitempty"`
	Waiting   string `json:"waiting,omitempty"`
	Error     string `json:"error,omitempty"`
}

// readNodeNetwork reads it for the node sides describes (nil: not
// joined, nothing in a machine to read).
func readNodeNetwork(l layout.Layout, sides *state.Sides) nodeNetwork {
	var n nodeNetwork
	if c, err := config.Load(l.OnRoot(l.ConfigFile())); err == nil {
		n.Mode = c.Networking.Mode
	} else {
		n.Error = "config not read: " + err.Error()
	}
	if sides == nil || sides.Active == "" {
		return n
	}
	n.Machine = sides.Active
	p, err := node.LoadedCNIConfig(l.OnRoot(l.MachineDir(n.Machine)))
	switch {
	case err != nil:
		n.Error = err.Error()
	case p != "":
		n.CNIConfig = p
	case n.Mode == config.NetworkModeCluster:
		n.Waiting = fmt.Sprintf("waits for the cluster's CNI: no network config in %s in machine %s yet; the node is not Ready until the CNI's DaemonSet pod on it writes one", node.CNIConfDir, n.Machine)
	default:
		n.Waiting = fmt.Sprintf("waits for its pod network: no network config in %s in machine %s yet (start writes the bridge config once the Node has a pod CIDR)", node.CNIConfDir, n.Machine)
	}
	return n
}

// printNetwork prints it as status's network line.
func printNetwork(w io.Writer, n nodeNetwork) {
	mode := "mode unknown"
	if n.Mode != "" {
		mode = n.Mode + " mode"
	}
	switch {
	case n.Error != "" && n.Machine == "":
		fmt.Fprintf(w, "network:    %s (%s)\n", mode, n.Error)
	case n.Machine == "":
		fmt.Fprintf(w, "network:    %s\n", mode)
	case n.CNIConfig != "" && n.Mode == config.NetworkModeCluster:
		fmt.Fprintf(w, "network:    %s: the cluster's CNI config %s in machine %s\n", mode, n.CNIConfig, n.Machine)
	case n.CNIConfig != "":
		fmt.Fprintf(w, "network:    %s: %s in machine %s\n", mode, n.CNIConfig, n.Machine)
	case n.Waiting != "":
		fmt.Fprintf(w, "network:    %s: %s\n", mode, n.Waiting)
	default:
		fmt.Fprintf(w, "network:    %s: %s\n", mode, n.Error)
	}
}

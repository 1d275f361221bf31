package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// The fallback pod network: a Linux bridge per node with host-local
// addresses from Options.PodCIDR, and portmap for hostPort. The plugin's
// ipMasq is off: it would masquerade pod-to-pod traffic to other nodes
// too; the agent masquerades only what leaves the pod networks
// (internal/network's MasqTable) and routes to the other nodes' pod
// CIDRs. Loopback needs no entry: containerd's CRI sets up lo in
// every pod itself. cniVersion 1.0.0 is understood by Debian's
// containernetworking-plugins 1.1.1 and every later release.
type cniConfList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

type cniBridge struct {
	Type        string       `json:"type"`
	Bridge      string       `json:"bridge"`
	IsGateway   bool         `json:"isGateway"`
	IPMasq      bool         `json:"ipMasq"`
	HairpinMode bool         `json:"hairpinMode"`
	IPAM        cniHostLocal `json:"ipam"`
}

type cniHostLocal struct {
	Type   string       `json:"type"`
	Ranges [][]cniRange `json:"ranges"`
	Routes []cniRoute   `json:"routes"`
}

type cniRange struct {
	Subnet string `json:"subnet"`
}

type cniRoute struct {
	Dst string `json:"dst"`
}

type cniPortmap struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// NetworkName and BridgeName are the CNI network and the Linux bridge the
// fallback config names; reset (internal/network) removes what they leave
// in the host's network namespace, which the machine shares.
const (
	NetworkName    = "aks-flex-node"
	BridgeName     = "cni0"
	cniNetworkName = NetworkName
	cniBridgeName  = BridgeName
)

func renderCNIConfig(in *inputs) ([]byte, error) {
	dst := "0.0.0.0/0"
	if in.podIPv6 {
		dst = "::/0"
	}
	list := cniConfList{
		CNIVersion: "1.0.0",
		Name:       cniNetworkName,
		Plugins: []any{
			cniBridge{
				Type:        "bridge",
				Bridge:      cniBridgeName,
				IsGateway:   true,
				IPMasq:      false,
				HairpinMode: true,
				IPAM: cniHostLocal{
					Type:   "host-local",
					Ranges: [][]cniRange{{{Subnet: in.o.PodCIDR}}},
					Routes: []cniRoute{{Dst: dst}},
				},
			},
			cniPortmap{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// WriteCNIConfig writes the fallback bridge CNI config for podCIDR into
// the machine rootfs at machineRoot (atomically, only when it differs):
// what start does once the Node's spec.podCIDR is known, when
// networking.podCIDR does not name the node's range. The CRI plugin
// watches the CNI config dir, so the running node picks it up.
func WriteCNIConfig(machineRoot string, c *config.Config, podCIDR string) (bool, error) {
	o, err := (Options{PodCIDR: podCIDR}).withDefaults()
	if err != nil {
		return false, err
	}
	in, err := newInputs(c, o)
	if err != nil {
		return false, err
	}
	data, err := renderCNIConfig(in)
	if err != nil {
		return false, err
	}
	changed, err := fsutil.WriteFileIn(machineRoot, CNIConfFile, data, 0o644)
	if err != nil {
		return false, fmt.Errorf("write %s in machine %s: %w", CNIConfFile, machineRoot, err)
	}
	return changed, nil
}

// LoadedCNIConfig names the network config containerd loads in the
// machine rootfs at machineRoot, as a path inside the machine: the first
// .conflist, .conf or .json file in CNIConfDir by name. "" without an
// error when there is none yet (the dir missing or empty): a node in
// networking.mode cluster waits for the cluster's CNI to write one.
func LoadedCNIConfig(machineRoot string) (string, error) {
	r, err := fsroot.OpenDir(machineRoot, CNIConfDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	d, err := r.Open(".")
	if err != nil {
		return "", err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		switch filepath.Ext(n) {
		case ".conflist", ".conf", ".json":
			return CNIConfDir + "/" + n, nil
		}
	}
	return "", nil
}

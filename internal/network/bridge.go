package network

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"

	"github.com/Azure/aks-flex-node/internal/node"
)

// BridgeName is the node's bridge (internal/node names it).
const BridgeName = node.BridgeName

// What the node leaves in the host's network namespace besides routes:
// the bridge and the veths the bridge plugin attached to it, and
// netfilter state (netfilter.go, legacy.go).

// Cleaner removes the node's bridge network from the host.
type Cleaner struct {
	Routes
	// HasNft says nft is installed; nil looks it up in PATH.
	HasNft func() bool
	// HasCmd says a command (iptables-legacy-save, ...) is installed; nil
	// looks it up in PATH.
	HasCmd func(name string) bool
}

func (c Cleaner) hasCmd(name string) bool {
	if c.HasCmd != nil {
		return c.HasCmd(name)
	}
	_, err := exec.LookPath(name)
	return err == nil
}

// RemoveBridge deletes the veths attached to the bridge, then the bridge.
func (c Cleaner) RemoveBridge(ctx context.Context) (bool, error) {
	out, err := c.ip(ctx, "-j", "link", "show")
	if err != nil {
		return false, err
	}
	var links []struct {
		IfName string `json:"ifname"`
		Master string `json:"master"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return false, fmt.Errorf("ip -j link: %w", err)
	}
	changed := false
	var bridge bool
	for _, l := range links {
		switch {
		case l.IfName == BridgeName:
			bridge = true
		case l.Master == BridgeName:
			// A veth goes with its peer; one whose pod's namespace is
			// already gone has gone with it.
			if _, err := c.ip(ctx, "link", "del", l.IfName); err != nil && c.linkExists(ctx, l.IfName) {
				return changed, fmt.Errorf("remove %s's port %s: %w", BridgeName, l.IfName, err)
			}
			changed = true
		}
	}
	if bridge {
		if _, err := c.ip(ctx, "link", "del", BridgeName); err != nil {
			return changed, fmt.Errorf("remove bridge %s: %w", BridgeName, err)
		}
		changed = true
	}
	return changed, nil
}

func (c Cleaner) linkExists(ctx context.Context, name string) bool {
	_, err := c.ip(ctx, "link", "show", "dev", name)
	return err == nil
}

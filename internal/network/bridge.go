package network

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/node"
)

// BridgeName is the node's bridge (internal/node names it).
const BridgeName = node.BridgeName

// What the node leaves in the host's network namespace besides routes:
// the bridge and the veths the bridge plugin attached to it, and
// netfilter state. The node's iptables (the worker image's iptables-nft)
// writes nft tables: chains named CNI-* (the bridge plugin's masquerade,
// portmap) and KUBE-* (the kubelet's canaries; kube-proxy's in iptables
// mode), the rules
// in other chains that jump to them, and the bridge plugin's own nft
// tables (cni_*) when it uses its nftables backend. Rules written through
// iptables-legacy are not in nft's view and are not removed.

// ownedChain says a chain is the node's.
func ownedChain(name string) bool {
	return strings.HasPrefix(name, "CNI-") || strings.HasPrefix(name, "KUBE-")
}

// ownedTable says a whole nft table is the node's: the CNI plugins'
// nftables backends name theirs cni_*, the agent's masquerade is
// MasqTable, and the agent's kube-proxy in nftables mode writes
// KubeProxyTable (ip and ip6).
func ownedTable(name string) bool {
	return strings.HasPrefix(name, "cni_") || name == MasqTable || name == KubeProxyTable
}

// KubeProxyTable is the nft table kube-proxy's nftables mode writes.
const KubeProxyTable = "kube-proxy"

// Cleaner removes the node's bridge network from the host.
type Cleaner struct {
	Routes
	// HasNft says nft is installed; nil looks it up in PATH.
	HasNft func() bool
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

func (c Cleaner) nft(ctx context.Context, args ...string) ([]byte, error) {
	run := c.Run
	if run == nil {
		run = hostos.Exec
	}
	return run(ctx, "nft", args...)
}

func (c Cleaner) hasNft() bool {
	if c.HasNft != nil {
		return c.HasNft()
	}
	_, err := exec.LookPath("nft")
	return err == nil
}

// nftRuleset is `nft -j list ruleset`, the parts read here.
type nftRuleset struct {
	Nftables []struct {
		Table *nftObj `json:"table"`
		Chain *nftObj `json:"chain"`
		Rule  *struct {
			nftObj
			Chain string            `json:"chain"`
			Expr  []json.RawMessage `json:"expr"`
		} `json:"rule"`
	} `json:"nftables"`
}

type nftObj struct {
	Family string `json:"family"`
	Table  string `json:"table"`
	Name   string `json:"name"`
	Handle int    `json:"handle"`
	Hook   string `json:"hook"`
}

// Tables lists the nft tables as "family name"; none without nft.
func (c Cleaner) Tables(ctx context.Context) ([]string, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range rs.Nftables {
		if o.Table != nil {
			out = append(out, o.Table.Family+" "+o.Table.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (c Cleaner) ruleset(ctx context.Context) (*nftRuleset, error) {
	rs := &nftRuleset{}
	if !c.hasNft() {
		return rs, nil
	}
	out, err := c.nft(ctx, "-j", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(out, rs); err != nil {
		return nil, fmt.Errorf("nft -j list ruleset: %w", err)
	}
	return rs, nil
}

// jumpsToOwned says a rule's expressions jump or go to an owned chain.
func jumpsToOwned(expr []json.RawMessage) bool {
	for _, e := range expr {
		var v struct {
			Jump *struct {
				Target string `json:"target"`
			} `json:"jump"`
			Goto *struct {
				Target string `json:"target"`
			} `json:"goto"`
		}
		if json.Unmarshal(e, &v) != nil {
			continue
		}
		if (v.Jump != nil && ownedChain(v.Jump.Target)) || (v.Goto != nil && ownedChain(v.Goto.Target)) {
			return true
		}
	}
	return false
}

// RemoveNetfilter removes the node's nft state: the rules that jump to
// owned chains, the owned chains, the owned tables, and then, when known
// (start recorded the host), every table not in before (the tables there
// were before start) that holds no rule and no chain but base chains: one
// the node's iptables made.
func (c Cleaner) RemoveNetfilter(ctx context.Context, before []string, known bool) (bool, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return false, err
	}
	var cmds [][]string
	var chains [][]string
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil && ownedTable(o.Table.Name):
			cmds = append(cmds, []string{"delete", "table", o.Table.Family, o.Table.Name})
		case o.Rule != nil && !ownedTable(o.Rule.Table) && !ownedChain(o.Rule.Chain) && jumpsToOwned(o.Rule.Expr):
			cmds = append(cmds, []string{"delete", "rule", o.Rule.Family, o.Rule.Table, o.Rule.Chain, "handle", fmt.Sprint(o.Rule.Handle)})
		case o.Chain != nil && !ownedTable(o.Chain.Table) && ownedChain(o.Chain.Name):
			chains = append(chains, []string{o.Chain.Family, o.Chain.Table, o.Chain.Name})
		}
	}
	// Owned chains jump to each other: empty them all before deleting any.
	for _, ch := range chains {
		cmds = append(cmds, append([]string{"flush", "chain"}, ch...))
	}
	for _, ch := range chains {
		cmds = append(cmds, append([]string{"delete", "chain"}, ch...))
	}
	for _, cmd := range cmds {
		if _, err := c.nft(ctx, cmd...); err != nil {
			return true, fmt.Errorf("nft %s: %w", strings.Join(cmd, " "), err)
		}
	}
	changed := len(cmds) > 0
	if !known {
		return changed, nil
	}
	removed, err := c.removeEmptyNewTables(ctx, before)
	return changed || removed, err
}

// removeEmptyNewTables deletes the tables not in before that are empty
// but for base chains.
func (c Cleaner) removeEmptyNewTables(ctx context.Context, before []string) (bool, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return false, err
	}
	had := map[string]bool{}
	for _, t := range before {
		had[t] = true
	}
	busy := map[string]bool{}
	var tables []string
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil:
			tables = append(tables, o.Table.Family+" "+o.Table.Name)
		case o.Rule != nil:
			busy[o.Rule.Family+" "+o.Rule.Table] = true
		case o.Chain != nil && o.Chain.Hook == "":
			busy[o.Chain.Family+" "+o.Chain.Table] = true
		}
	}
	changed := false
	for _, t := range tables {
		if had[t] || busy[t] {
			continue
		}
		if _, err := c.nft(ctx, append([]string{"delete", "table"}, strings.Fields(t)...)...); err != nil {
			return changed, fmt.Errorf("nft delete table %s: %w", t, err)
		}
		changed = true
	}
	return changed, nil
}

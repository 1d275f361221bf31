package network

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/node"
)

// The node's netfilter state. The node's iptables (the worker image's
// iptables-nft) writes nft tables: chains named CNI-* (the bridge
// plugin's masquerade, portmap) and KUBE-* (the kubelet's canaries;
// kube-proxy's in iptables mode), the rules in other chains that jump to
// them, and the bridge plugin's own nft tables (cni_*) when it uses its
// nftables backend. An image whose iptables is iptables-legacy writes the
// same chains into the kernel's x_tables instead (legacy.go).
//
// Other CNI users on the host (podman, nerdctl) write chains of the same
// names, so the name alone does not say whose a chain is: start records
// the host's tables and chains before the node first runs (Snapshot), and
// reset removes only owned-named chains and tables not in that record,
// the rules that jump to them, and the tables the node's iptables made
// that are left empty. A chain made after start by another CNI user is
// told by the comment the CNI plugins put on the rules that jump to their
// per-container chains (name: "<network>" id: "<container>"): a chain a
// rule commented with another network than the node's jumps to is not
// the node's (foreignCNIChain). A table with a base chain whose policy is not
// accept is never removed: it filters (an admin's forward drop), and the
// node's iptables makes only accept-policy base chains.

// ownedChain says a chain's name is one the node's components use.
func ownedChain(name string) bool {
	return strings.HasPrefix(name, "CNI-") || strings.HasPrefix(name, "KUBE-")
}

// ownedTable says an nft table's name is one the node's components use:
// the CNI plugins' nftables backends name theirs cni_*, the agent's
// masquerade is MasqTable, and the agent's kube-proxy in nftables mode
// writes KubeProxyTable (ip and ip6).
func ownedTable(name string) bool {
	return strings.HasPrefix(name, "cni_") || name == MasqTable || name == KubeProxyTable
}

// KubeProxyTable is the nft table kube-proxy's nftables mode writes.
const KubeProxyTable = "kube-proxy"

// Before is the host's netfilter state before the node first ran: nft
// tables ("family name") and chains ("family table chain"), and the
// chains of iptables-legacy ("iptables|ip6tables table chain").
// ChainsKnown is false for a record written before chains were recorded:
// then every owned-named chain counts as the node's.
type Before struct {
	Tables       []string `json:"nftTables"`
	Chains       []string `json:"nftChains,omitempty"`
	LegacyChains []string `json:"legacyChains,omitempty"`
	ChainsKnown  bool     `json:"chainsRecorded,omitempty"`
}

// Snapshot reads the host's netfilter state, as start records it.
func (c Cleaner) Snapshot(ctx context.Context) (Before, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return Before{}, err
	}
	b := Before{Tables: []string{}, Chains: []string{}, ChainsKnown: true}
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil:
			b.Tables = append(b.Tables, o.Table.Family+" "+o.Table.Name)
		case o.Chain != nil:
			b.Chains = append(b.Chains, o.Chain.key())
		}
	}
	if b.LegacyChains, err = c.legacyChains(ctx); err != nil {
		return Before{}, err
	}
	sort.Strings(b.Tables)
	sort.Strings(b.Chains)
	return b, nil
}

// Tables lists the nft tables as "family name"; none without nft.
func (c Cleaner) Tables(ctx context.Context) ([]string, error) {
	b, err := c.Snapshot(ctx)
	return b.Tables, err
}

func (c Cleaner) nft(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, "nft", args...)
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
			Chain   string            `json:"chain"`
			Expr    []json.RawMessage `json:"expr"`
			Comment string            `json:"comment"`
		} `json:"rule"`
	} `json:"nftables"`
}

type nftObj struct {
	Family string `json:"family"`
	Table  string `json:"table"`
	Name   string `json:"name"`
	Handle int    `json:"handle"`
	Hook   string `json:"hook"`
	Policy string `json:"policy"`
}

func (o *nftObj) key() string { return o.Family + " " + o.Table + " " + o.Name }

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

// jumpTargets are the chains a rule's expressions jump or go to.
func jumpTargets(expr []json.RawMessage) []string {
	var out []string
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
		if v.Jump != nil {
			out = append(out, v.Jump.Target)
		}
		if v.Goto != nil {
			out = append(out, v.Goto.Target)
		}
	}
	return out
}

// cniNetworkName matches the network a CNI plugin's rule comment names.
var cniNetworkName = regexp.MustCompile(`(?:^|\s)name: "([^"]*)"`)

// foreignCNIComment says a rule's comment is a CNI plugin's for another
// network than the node's (node.NetworkName).
func foreignCNIComment(comment string) bool {
	m := cniNetworkName.FindStringSubmatch(comment)
	return m != nil && m[1] != node.NetworkName
}

// nodes says which owned-named tables and chains are the node's: not in
// the record of before (when it is known).
type nodes struct {
	before      Before
	known       bool
	hadTable    map[string]bool
	hadChain    map[string]bool
	chainsKnown bool
}

func newNodes(before Before, known bool) nodes {
	n := nodes{before: before, known: known, hadTable: map[string]bool{}, hadChain: map[string]bool{}, chainsKnown: known && before.ChainsKnown}
	for _, t := range before.Tables {
		n.hadTable[t] = true
	}
	for _, ch := range append(slices.Clone(before.Chains), before.LegacyChains...) {
		n.hadChain[ch] = true
	}
	return n
}

func (n nodes) table(family, name string) bool {
	return ownedTable(name) && !(n.known && n.hadTable[family+" "+name])
}

func (n nodes) chain(key, name string) bool {
	return ownedChain(name) && !(n.chainsKnown && n.hadChain[key])
}

// RemoveNetfilter removes the node's netfilter state (see the top of this
// file): in nft, the owned tables and chains the node made, the rules
// that jump to those chains and then, when before is known (start
// recorded the host), every table not in it that is empty but for
// accept-policy base chains; then the same chains and rules in
// iptables-legacy.
func (c Cleaner) RemoveNetfilter(ctx context.Context, before Before, known bool) (bool, error) {
	n := newNodes(before, known)
	changed, err := c.removeNft(ctx, n)
	if err != nil {
		return changed, err
	}
	if known {
		removed, err := c.removeEmptyNewTables(ctx, n)
		changed = changed || removed
		if err != nil {
			return changed, err
		}
	}
	removed, err := c.removeLegacy(ctx, n)
	return changed || removed, err
}

func (c Cleaner) removeNft(ctx context.Context, n nodes) (bool, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return false, err
	}
	gone := map[string]bool{} // "family table" of removed tables, and chain keys
	foreign := map[string]bool{}
	for _, o := range rs.Nftables {
		if r := o.Rule; r != nil && foreignCNIComment(r.Comment) {
			for _, t := range jumpTargets(r.Expr) {
				foreign[r.Family+" "+r.Table+" "+t] = true
			}
		}
	}
	var cmds [][]string
	var chains [][]string
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil && n.table(o.Table.Family, o.Table.Name):
			gone[o.Table.Family+" "+o.Table.Name] = true
			cmds = append(cmds, []string{"delete", "table", o.Table.Family, o.Table.Name})
		case o.Chain != nil && !ownedTable(o.Chain.Table) && !foreign[o.Chain.key()] && n.chain(o.Chain.key(), o.Chain.Name):
			gone[o.Chain.key()] = true
			chains = append(chains, []string{o.Chain.Family, o.Chain.Table, o.Chain.Name})
		}
	}
	for _, o := range rs.Nftables {
		r := o.Rule
		if r == nil || gone[r.Family+" "+r.Table] || gone[r.Family+" "+r.Table+" "+r.Chain] {
			continue
		}
		if slices.ContainsFunc(jumpTargets(r.Expr), func(t string) bool { return gone[r.Family+" "+r.Table+" "+t] }) {
			cmds = append(cmds, []string{"delete", "rule", r.Family, r.Table, r.Chain, "handle", fmt.Sprint(r.Handle)})
		}
	}
	// The node's chains jump to each other: empty them all before deleting any.
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
	return len(cmds) > 0, nil
}

// removeEmptyNewTables deletes the tables not in before that hold no
// rule and no chain but base chains whose policy is accept: the ones the
// node's iptables made. A drop-policy base chain (an admin's forward
// drop) keeps its table.
func (c Cleaner) removeEmptyNewTables(ctx context.Context, n nodes) (bool, error) {
	rs, err := c.ruleset(ctx)
	if err != nil {
		return false, err
	}
	busy := map[string]bool{}
	var tables []string
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil:
			tables = append(tables, o.Table.Family+" "+o.Table.Name)
		case o.Rule != nil:
			busy[o.Rule.Family+" "+o.Rule.Table] = true
		case o.Chain != nil && (o.Chain.Hook == "" || (o.Chain.Policy != "" && o.Chain.Policy != "accept")):
			busy[o.Chain.Family+" "+o.Chain.Table] = true
		}
	}
	changed := false
	for _, t := range tables {
		if n.hadTable[t] || busy[t] {
			continue
		}
		if _, err := c.nft(ctx, append([]string{"delete", "table"}, strings.Fields(t)...)...); err != nil {
			return changed, fmt.Errorf("nft delete table %s: %w", t, err)
		}
		changed = true
	}
	return changed, nil
}

func (c Cleaner) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	run := c.Run
	if run == nil {
		run = hostos.Exec
	}
	return run(ctx, name, args...)
}

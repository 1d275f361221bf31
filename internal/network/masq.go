package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// MasqTable is the nft table (family ip) that holds a bridge-mode node's
// masquerade: the pods' traffic leaving the cluster's pod networks goes
// out with the host's address; traffic to another node's pods keeps the
// pod's. The bridge plugin's own ipMasq would masquerade everything
// outside this node's range, pod-to-pod across nodes included, so the
// node's CNI config turns it off and the agent writes this table. Reset
// removes it with the plugins' tables.
const MasqTable = "aks_flex_node"

// multicast is never masqueraded (as the bridge plugin leaves it).
var multicast = netip.MustParsePrefix("224.0.0.0/4")

// MasqueradeRules is the nft script that replaces MasqTable with the
// masquerade of own's traffic to anything outside podNets (own counts as
// one). It is one transaction: the table is made, deleted and written
// again at once.
func MasqueradeRules(own netip.Prefix, podNets []netip.Prefix) string {
	nets := make([]string, 0, len(podNets)+2)
	for _, p := range collapse(append(slices.Clone(podNets), own.Masked(), multicast)) {
		nets = append(nets, p.String())
	}
	return fmt.Sprintf(`table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain postrouting {
		type nat hook postrouting priority 100; policy accept;
		ip saddr %[2]s ip daddr != { %[3]s } masquerade
	}
}
`, MasqTable, own.Masked(), strings.Join(nets, ", "))
}

// collapse sorts the IPv4 prefixes and drops those inside another (nft
// refuses overlapping elements in a set); pod CIDRs nest or are disjoint.
func collapse(ps []netip.Prefix) []netip.Prefix {
	var v4 []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Is4() {
			v4 = append(v4, p.Masked())
		}
	}
	slices.SortFunc(v4, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range v4 {
		if n := len(out); n > 0 && out[n-1].Contains(p.Addr()) && out[n-1].Bits() <= p.Bits() {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ApplyMasquerade writes rules (from MasqueradeRules) through nft.
func (c Cleaner) ApplyMasquerade(ctx context.Context, rules string) error {
	if !c.hasNft() {
		return fmt.Errorf("nft is not installed: the pods' masquerade (table ip %s) needs it", MasqTable)
	}
	if _, err := c.nft(ctx, rules); err != nil {
		return fmt.Errorf("nft: write table ip %s: %w", MasqTable, err)
	}
	return nil
}

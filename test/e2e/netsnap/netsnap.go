// Package netsnap is how the end-to-end tests compare a test host's
// network before a join and after reset: addresses, every route table,
// iptables and nft, in the host's namespace. The node's machine shares
// that namespace (VirtualEthernet=no), so there is no other to look at.
package netsnap

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// State is one snapshot: each command's output, by command.
type State map[string]string

var (
	counters  = regexp.MustCompile(`\[\d+:\d+\]`)
	generated = regexp.MustCompile(`(?m)^# .*\n`)
)

// Take snapshots h's network namespace.
func Take(t testing.TB, h *aclhost.Host) State {
	t.Helper()
	begin := time.Now()
	defer func() { t.Logf("BENCH network-snapshot=%v", time.Since(begin).Round(time.Millisecond)) }()
	s := State{}
	for _, cmd := range [][]string{
		{"ip", "-j", "addr"},
		{"ip", "-j", "route", "show", "table", "all"},
		{"iptables-save"},
		{"ip6tables-save"},
		{"nft", "-j", "list", "ruleset"},
	} {
		out := h.RunOK(t, cmd...)
		switch cmd[0] {
		case "iptables-save", "ip6tables-save":
			// Packet counters and the "generated at" comments change on
			// their own.
			out = generated.ReplaceAllString(counters.ReplaceAllString(out, ""), "")
		case "nft":
			out = NftRuleset(t, out)
		}
		s[strings.Join(cmd, " ")] = out
	}
	return s
}

// NftKey is the nft ruleset's key in a State.
const NftKey = "nft -j list ruleset"

// NftRuleset is `nft -j list ruleset` output as a State holds it: without
// nft's metainfo (its version).
func NftRuleset(t testing.TB, out string) string {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v\n%s", err, out)
	}
	var keep []string
	for _, o := range doc.Nftables {
		if _, meta := o["metainfo"]; meta {
			continue
		}
		b, _ := json.Marshal(o)
		keep = append(keep, string(b))
	}
	return strings.Join(keep, "\n")
}

// Diff names what differs between two snapshots.
func Diff(before, after State) []string {
	var out []string
	for k, b := range before {
		if a := after[k]; a != b {
			out = append(out, fmt.Sprintf("%s before join:\n%s\nafter reset:\n%s", k, b, a))
		}
	}
	return out
}

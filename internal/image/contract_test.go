package image

import (
	"archive/tar"
	"strings"
	"testing"
)

// nftOnlyTree is a worker image that meets every contract item but has
// nft and no iptables.
func nftOnlyTree(t *testing.T) *Tree {
	tr := NewTree()
	files := map[string]int64{
		"usr/lib/systemd/systemd": 0o755, "usr/bin/mount": 0o755, "usr/bin/umount": 0o755, "usr/bin/nsenter": 0o755,
		"usr/sbin/nft": 0o755, "usr/sbin/ip": 0o755, "usr/sbin/conntrack": 0o755, "usr/sbin/modprobe": 0o755,
		"etc/ssl/certs/ca-certificates.crt": 0o644, "etc/os-release": 0o644,
	}
	for _, d := range []string{"usr", "usr/lib", "usr/lib/systemd", "usr/bin", "usr/sbin", "etc", "etc/ssl", "etc/ssl/certs"} {
		if err := tr.AddHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range files {
		if err := tr.AddHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: mode, Size: 10}); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// Issue 26 item 13e: the contract follows what the node will run. The
// node's bridge CNI config chains the portmap plugin and kube-proxy's
// iptables mode calls iptables: an image with nft and no iptables fails
// the contract then, `image check` (which judges for the default config,
// bridge networking) included; it passes when only kube-proxy's nftables
// mode, or nothing of the node's, calls a netfilter tool.
func TestImageContractFollowsWhatTheNodeRuns(t *testing.T) {
	tr := nftOnlyTree(t)
	miss := func(fs []Finding) string {
		var out []string
		for _, f := range Misses(fs) {
			out = append(out, f.Item+": "+f.Detail)
		}
		return strings.Join(out, "; ")
	}
	if m := miss(CheckContract(tr)); !strings.Contains(m, "iptables: ") || !strings.Contains(m, "portmap") {
		t.Errorf("image check (the default config's needs): misses %q, want iptables named with why", m)
	}
	if m := miss(CheckContractFor(tr, Needs{IPTables: true})); !strings.Contains(m, "iptables") {
		t.Errorf("bridge networking: misses %q", m)
	}
	if m := miss(CheckContractFor(tr, Needs{NFT: true})); m != "" {
		t.Errorf("kube-proxy nftables mode, the cluster's CNI: misses %q", m)
	}
	if m := miss(CheckContractFor(tr, Needs{})); m != "" {
		t.Errorf("nothing of the node's calls iptables: misses %q", m)
	}
}

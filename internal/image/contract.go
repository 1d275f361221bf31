package image

import (
	"archive/tar"
	"fmt"
	"strings"
)

// ContractVersion is the version of the worker image contract below;
// images this builder writes carry it in the LabelContract label.
const ContractVersion = "1"

// The worker image contract: what the machine's rootfs must hold for the
// product to boot it and run a Kubernetes node in it, and what it must
// not hold because the offline bundle installs it. Each item is checked
// on the image's file tree (from its layers' headers: nothing is run).
//
//	systemd          /usr/lib/systemd/systemd: systemd-nspawn --boot runs it as init
//	mount, umount    kubelet mounts volumes
//	nsenter          kubelet and the CNI plugins enter namespaces
//	iptables         iptables when the node runs the portmap CNI plugin (bridge
//	                 networking) or kube-proxy in iptables mode; nft when
//	                 kube-proxy runs in nftables mode; else either (Needs)
//	ip               the CNI bridge plugin and the node's routes
//	conntrack        flushing stale NAT entries
//	modprobe         kubelet and containerd load modules they need
//	ca-certificates  a CA bundle for image pulls over TLS
//	os-release       /etc/os-release or /usr/lib/os-release
//	no-kubelet       kubelet comes from the bundle, not the image
//	no-containerd    containerd comes from the bundle, not the image

// ContractItem is one requirement of the contract.
type ContractItem struct {
	Name string
	What string
	// check returns whether the tree meets the item, and what it found
	// (or looked for).
	check func(t *Tree) (bool, string)
}

// Finding is one item checked on one image.
type Finding struct {
	Item   string `json:"item"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// searchPath is where executables are looked up in the machine.
var searchPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Needs says which netfilter tools the node will call inside the machine:
// the contract requires those (ContractFor). The bundle's portmap CNI
// plugin, which the node's bridge CNI config chains for hostPort, and
// kube-proxy in iptables mode call iptables; kube-proxy in nftables mode
// calls nft. With none of them (the cluster's CNI, the cluster's
// kube-proxy) either tool does, for the kubelet's own rules.
type Needs struct {
	IPTables bool
	NFT      bool
}

// DefaultNeeds are the default config's: bridge networking, so portmap.
var DefaultNeeds = Needs{IPTables: true}

// Contract is the worker image contract for the default config
// (DefaultNeeds), in the order it is reported.
var Contract = ContractFor(DefaultNeeds)

// ContractFor is the worker image contract for a node that needs n.
func ContractFor(n Needs) []ContractItem {
	items := []ContractItem{
		{"systemd", "systemd as init (/usr/lib/systemd/systemd)", func(t *Tree) (bool, string) {
			return anyFile(t, []string{"/usr/lib/systemd/systemd", "/lib/systemd/systemd"}, true)
		}},
		executable("mount"),
		executable("umount"),
		executable("nsenter"),
	}
	switch {
	case n.IPTables || n.NFT:
		if n.IPTables {
			items = append(items, because(executable("iptables"), "the portmap CNI plugin (bridge networking: hostPort) and kube-proxy's iptables mode call iptables"))
		}
		if n.NFT {
			items = append(items, because(executable("nft"), "kube-proxy's nftables mode calls nft"))
		}
	default:
		items = append(items, executable("iptables", "nft"))
	}
	return append(items,
		executable("ip"),
		executable("conntrack"),
		executable("modprobe"),
		ContractItem{"ca-certificates", "a CA certificate bundle", func(t *Tree) (bool, string) {
			return anyFile(t, []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}, false)
		}},
		ContractItem{"os-release", "/etc/os-release or /usr/lib/os-release", func(t *Tree) (bool, string) {
			return anyFile(t, []string{"/etc/os-release", "/usr/lib/os-release"}, false)
		}},
		absent("kubelet"),
		absent("containerd"),
	)
}

// because adds why the node needs an item to its description and to the
// finding of an image that misses it.
func because(it ContractItem, why string) ContractItem {
	check := it.check
	it.What += " (" + why + ")"
	it.check = func(t *Tree) (bool, string) {
		ok, detail := check(t)
		if !ok {
			detail += ": " + why
		}
		return ok, detail
	}
	return it
}

// executable is the item "one of names is an executable on the search
// path", named after the first.
func executable(names ...string) ContractItem {
	what := names[0] + " on PATH"
	if len(names) > 1 {
		what = strings.Join(names, " or ") + " on PATH"
	}
	return ContractItem{Name: names[0], What: what, check: func(t *Tree) (bool, string) {
		for _, n := range names {
			if p, ok := lookPath(t, n); ok {
				return true, p
			}
		}
		return false, "none of " + strings.Join(names, ", ") + " in " + strings.Join(searchPath, ":")
	}}
}

// absent is the item "name is not on the search path".
func absent(name string) ContractItem {
	return ContractItem{Name: "no-" + name, What: name + " not in the image (the bundle installs it)", check: func(t *Tree) (bool, string) {
		if p, ok := lookPath(t, name); ok {
			return false, p + " is in the image: the offline bundle installs " + name + "; build the image without it"
		}
		return true, "not in the image"
	}}
}

// lookPath finds name on searchPath the way a shell in the machine
// would: the first executable regular file, links followed.
func lookPath(t *Tree, name string) (string, bool) {
	for _, d := range searchPath {
		p := d + "/" + name
		if _, n, err := t.Resolve(p); err == nil && n != nil && n.Type == tar.TypeReg && n.Mode&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// anyFile finds the first of paths that resolves to a non-empty regular
// file (executable, when exec is set).
func anyFile(t *Tree, paths []string, exec bool) (bool, string) {
	for _, p := range paths {
		_, n, err := t.Resolve(p)
		if err != nil || n == nil || n.Type != tar.TypeReg || n.Size == 0 {
			continue
		}
		if exec && n.Mode&0o111 == 0 {
			continue
		}
		return true, p
	}
	return false, "none of " + strings.Join(paths, ", ")
}

// CheckContract checks t against every contract item, for the default
// config (DefaultNeeds).
func CheckContract(t *Tree) []Finding { return CheckContractFor(t, DefaultNeeds) }

// CheckContractFor checks t against the contract for a node that needs n.
func CheckContractFor(t *Tree, n Needs) []Finding {
	items := ContractFor(n)
	out := make([]Finding, 0, len(items))
	for _, it := range items {
		ok, detail := it.check(t)
		out = append(out, Finding{Item: it.Name, OK: ok, Detail: detail})
	}
	return out
}

// Misses are the findings that failed.
func Misses(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if !f.OK {
			out = append(out, f)
		}
	}
	return out
}

// ContractError is an image that misses contract items.
type ContractError struct {
	Image  string
	Misses []Finding
}

func (e *ContractError) Error() string {
	parts := make([]string, len(e.Misses))
	for i, m := range e.Misses {
		parts[i] = m.Item + ": " + m.Detail
	}
	return fmt.Sprintf("worker image %s does not meet the worker image contract: %s", e.Image, strings.Join(parts, "; "))
}

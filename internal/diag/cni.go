package diag

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// checkCNI: the machine has a CNI network config (the one containerd
// loads: the first in name order), and the node's pod CIDR is routed in
// the machine's network namespace.
func checkCNI(e *Env) preflight.Check {
	return preflight.NewCheck(NameCNI, node.CNIConfDir+" in the machine", func(ctx context.Context) preflight.Result {
		name, conf, err := e.cniConfig()
		if err != nil {
			if e.Config != nil && e.Config.Networking.ClusterCNI() {
				return preflight.Error("networking.mode is cluster: the node waits for the cluster's CNI (its DaemonSet's pod on this node) to write its config into "+node.CNIConfDir+" in the machine; check that pod (kubectl get pods -A -o wide --field-selector spec.nodeName="+e.nodeName()+")", "%v", err)
			}
			return preflight.Error("aks-flex-node start writes the fallback bridge network ("+node.CNIConfFile+"); a CNI the cluster installs writes its own", "%v", err)
		}
		cidrs := conf.ranges
		source := "the CNI config"
		if p := e.apiServer(ctx); p.node != nil && len(p.node.Spec.PodCIDRs) > 0 {
			if len(cidrs) > 0 && !sameSet(cidrs, p.node.Spec.PodCIDRs) {
				return preflight.Warning("the bridge gives pods addresses the cluster did not assign this node; with several nodes, set each node's range to the Node's podCIDR",
					"%s hands out %s but the Node's pod CIDR is %s", name, strings.Join(cidrs, ","), strings.Join(p.node.Spec.PodCIDRs, ","))
			}
			cidrs, source = p.node.Spec.PodCIDRs, "the Node's"
		}
		if len(cidrs) == 0 {
			return preflight.OK("%s (network %s: %s); it names no pod range to check routes for", name, conf.network, strings.Join(conf.plugins, ","))
		}
		pid, err := e.machineLeader(ctx)
		if err != nil {
			return preflight.Warning("see machine", "routes not checked: %v", err)
		}
		var routed, missing []string
		for _, c := range cidrs {
			dev, err := routeFor(filepath.Join(e.procDir(), strconv.Itoa(pid), "net"), c)
			switch {
			case err != nil:
				return preflight.Warning("check the machine's network namespace: ip route (it is the host's when VirtualEthernet=no)", "routes of machine %s: %v", e.machineName(), err)
			case dev == "":
				missing = append(missing, c)
			default:
				routed = append(routed, c+" via "+dev)
			}
		}
		if len(missing) > 0 {
			return preflight.Warning("the bridge plugin makes the route with the first pod on this node; if pods run and it is still missing, check the CNI plugin's log in the kubelet's: "+e.unitHint("kubelet.service"),
				"no route for %s pod CIDR %s in machine %s (%s: %s)", source, strings.Join(missing, ","), e.machineName(), name, strings.Join(conf.plugins, ","))
		}
		return preflight.OK("%s (network %s: %s), pod CIDR %s", name, conf.network, strings.Join(conf.plugins, ","), strings.Join(routed, ", "))
	})
}

type cniConf struct {
	network string
	plugins []string
	ranges  []string
}

// cniConfig reads the CNI config containerd loads: the first .conflist,
// .conf or .json file in the conf dir, by name.
func (e *Env) cniConfig() (string, cniConf, error) {
	p, err := node.LoadedCNIConfig(e.machineRoot())
	if err != nil {
		return "", cniConf{}, fmt.Errorf("CNI config dir %s in machine %s: %w", node.CNIConfDir, e.machineName(), err)
	}
	if p == "" {
		return "", cniConf{}, fmt.Errorf("no network config (.conflist, .conf) in %s in machine %s", node.CNIConfDir, e.machineName())
	}
	data, err := fsutil.ReadFileIn(e.machineRoot(), p, 1<<20)
	if err != nil {
		return p, cniConf{}, fmt.Errorf("read %s in machine %s: %w", p, e.machineName(), err)
	}
	c, err := parseCNI(data)
	if err != nil {
		return p, cniConf{}, fmt.Errorf("%s in machine %s, the config containerd loads, does not parse: %w", p, e.machineName(), err)
	}
	return p, c, nil
}

func parseCNI(data []byte) (cniConf, error) {
	type plugin struct {
		Type string `json:"type"`
		IPAM struct {
			Subnet string `json:"subnet"`
			Ranges [][]struct {
				Subnet string `json:"subnet"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	var doc struct {
		Name    string   `json:"name"`
		Plugins []plugin `json:"plugins"`
		plugin
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return cniConf{}, err
	}
	if doc.Type != "" {
		doc.Plugins = append(doc.Plugins, doc.plugin)
	}
	if len(doc.Plugins) == 0 {
		return cniConf{}, fmt.Errorf("no plugins")
	}
	c := cniConf{network: doc.Name}
	for _, p := range doc.Plugins {
		c.plugins = append(c.plugins, p.Type)
		if p.IPAM.Subnet != "" {
			c.ranges = append(c.ranges, p.IPAM.Subnet)
		}
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				c.ranges = append(c.ranges, r.Subnet)
			}
		}
	}
	return c, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, s := range a {
		_, n, err := net.ParseCIDR(s)
		if err == nil {
			s = n.String()
		}
		m[s] = true
	}
	for _, s := range b {
		_, n, err := net.ParseCIDR(s)
		if err == nil {
			s = n.String()
		}
		if !m[s] {
			return false
		}
	}
	return true
}

// routeFor returns the device of a route that covers cidr (not the
// default route) in the routing tables of /proc/<pid>/net: route for
// IPv4, ipv6_route for IPv6. "" means none.
func routeFor(netDir, cidr string) (string, error) {
	_, want, err := net.ParseCIDR(cidr)
	if err != nil {
		return "", err
	}
	wantOnes, _ := want.Mask.Size()
	if want.IP.To4() != nil {
		return scanRoutes(filepath.Join(netDir, "route"), func(f []string) (string, bool) {
			if len(f) < 8 || f[0] == "Iface" {
				return "", false
			}
			dst, err1 := hexIPv4(f[1])
			mask, err2 := hexIPv4(f[7])
			ones, _ := net.IPMask(mask).Size()
			return f[0], err1 == nil && err2 == nil && ones > 0 && ones <= wantOnes && (&net.IPNet{IP: dst, Mask: net.IPMask(mask)}).Contains(want.IP)
		})
	}
	return scanRoutes(filepath.Join(netDir, "ipv6_route"), func(f []string) (string, bool) {
		if len(f) < 10 {
			return "", false
		}
		dst, err := hex.DecodeString(f[0])
		ones, err2 := strconv.ParseInt(f[1], 16, 32)
		if err != nil || err2 != nil || ones == 0 || int(ones) > wantOnes {
			return "", false
		}
		return f[9], (&net.IPNet{IP: net.IP(dst), Mask: net.CIDRMask(int(ones), 128)}).Contains(want.IP)
	})
}

func scanRoutes(path string, match func([]string) (string, bool)) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if dev, ok := match(strings.Fields(sc.Text())); ok {
			return dev, nil
		}
	}
	return "", sc.Err()
}

// hexIPv4 reads an address of /proc/net/route: 8 hex digits, little
// endian.
func hexIPv4(s string) (net.IP, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return nil, fmt.Errorf("not an address: %q", s)
	}
	return net.IPv4(b[3], b[2], b[1], b[0]).To4(), nil
}

package lifecycle

import (
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/image"
)

// Issue 26 item 13e: the worker image contract start and the repave check
// follows the config: bridge networking (portmap) and the agent's
// kube-proxy in iptables mode need iptables, its nftables mode nft, the
// cluster's CNI with the cluster's kube-proxy neither in particular.
func TestImageContractFollowsTheConfig(t *testing.T) {
	for _, tc := range []struct {
		mode, proxy, proxyMode string
		want                   image.Needs
	}{
		{config.NetworkModeBridge, config.KubeProxyDaemonSet, "", image.Needs{IPTables: true}},
		{config.NetworkModeCluster, config.KubeProxyDaemonSet, "", image.Needs{}},
		{config.NetworkModeCluster, config.KubeProxyAgent, config.KubeProxyIPTables, image.Needs{IPTables: true}},
		{config.NetworkModeCluster, config.KubeProxyAgent, config.KubeProxyNFTables, image.Needs{NFT: true}},
		{config.NetworkModeBridge, config.KubeProxyAgent, config.KubeProxyNFTables, image.Needs{IPTables: true, NFT: true}},
	} {
		c := &config.Config{}
		c.Networking.Mode, c.Networking.KubeProxy, c.Networking.KubeProxyMode = tc.mode, tc.proxy, tc.proxyMode
		if got := ImageNeeds(c); got != tc.want {
			t.Errorf("%s, kube-proxy %s %s: needs %+v, want %+v", tc.mode, tc.proxy, tc.proxyMode, got, tc.want)
		}
	}
	c := &config.Config{}
	c.Networking.Mode = config.NetworkModeBridge
	if s := NewStart(Options{Config: c}); s.provisioner.Needs == nil || !s.provisioner.Needs.IPTables {
		t.Errorf("start's provisioner checks the contract for %+v", s.provisioner.Needs)
	}
}

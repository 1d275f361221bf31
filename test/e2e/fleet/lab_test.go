package fleet

import (
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/e2e/netlab"
)

// lab is the fleet's network: netlab's bridge (a router namespace with a
// bridge every host's namespace is wired to), shared with the rollout
// e2e.
type lab struct {
	link  *netlab.Link
	hosts []labHost
}

// labHost is one host's namespace and its address on the bridge.
type labHost = netlab.BridgeHost

// newLab makes the bridge and n host namespaces; everything goes when t
// ends.
func newLab(t *testing.T, n int) *lab {
	t.Helper()
	b := netlab.NewBridge(t, n)
	return &lab{link: b.Link, hosts: b.Hosts}
}

func nsName(path string) string { return path[strings.LastIndex(path, "/")+1:] }

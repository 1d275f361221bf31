package daemon

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
)

// cachedReads is a node client whose reads of a Node that allow any
// version (GetOptions resourceVersion "0", the API server's own "a
// possibly stale answer will do") are served by the process's Node
// informer when it holds the Node: the repave's waits poll the node's own
// Node every half second (wait-node-version, the pod CIDR), and the
// rollout bench counted those polls as most of an agent's requests during
// a rollout. A read without a version (a fresh read: the cordon's "was it
// cordoned before", the heartbeat a wait compares with) goes to the
// server as before, and so does everything else.
type cachedReads struct {
	kubeclient.Interface
	nodes *NodeInformer
}

func (c cachedReads) CoreV1() kubeclient.CoreV1 { return cachedCore{c.Interface.CoreV1(), c.nodes} }

type cachedCore struct {
	kubeclient.CoreV1
	nodes *NodeInformer
}

func (c cachedCore) Nodes() kubeclient.Nodes { return cachedNodeReads{c.CoreV1.Nodes(), c.nodes} }

type cachedNodeReads struct {
	kubeclient.Nodes
	nodes *NodeInformer
}

func (c cachedNodeReads) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	if opts.ResourceVersion == "0" {
		// Only the node's own Node is kept whole enough (conditions,
		// node info) for any reader: another's is trimmed.
		if n, ok := c.nodes.Node(name); ok && name == c.nodes.self {
			return n.DeepCopy(), nil
		}
	}
	return c.Nodes.Get(ctx, name, opts)
}

// repaveClient is lifecycle's default repave client (the node's
// credential from the machine at root, the Repave policy) with its
// stale-allowed reads of the node's own Node served by nodes.
func repaveClient(nodes *NodeInformer) func(c *config.Config, l layout.Layout, root string) (kubeclient.Interface, error) {
	return func(c *config.Config, l layout.Layout, root string) (kubeclient.Interface, error) {
		cfg, err := node.ClientConfig(c, l, root)
		if err != nil {
			return nil, err
		}
		cs, err := kubeclient.New(cfg, kubeclient.Repave)
		if err != nil {
			return nil, err
		}
		return cachedReads{cs, nodes}, nil
	}
}

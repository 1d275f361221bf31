package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/node"
)

// NamePodCIDR: where the node's pod network comes from is known. In
// bridge mode without networking.podCIDR, start takes the Node's
// spec.podCIDR, which only a controller manager run with
// --allocate-node-cidrs gives: the check asks the cluster, read-only with
// the join credential, whether its Nodes carry one.
const NamePodCIDR = "pod-cidr"

// podCIDRListLimit bounds the Nodes the check reads: a few show whether
// the controller manager allocates.
const podCIDRListLimit = 50

func podCIDRCheck(e *Env) Check {
	n := &e.Config.Networking
	return NewCheck(NamePodCIDR, "networking.mode "+n.Mode, func(ctx context.Context) Result {
		r := podCIDRSource(ctx, e)
		if n.ClusterCNI() || n.ClusterPodCIDR != "" || r.Severity != SeverityOK {
			return r
		}
		// Bridge mode routes to other nodes' pods only inside the
		// cluster's pod range (a Node's pod CIDR is cluster data, not host
		// configuration): without it pods reach no pod on another node,
		// which a join that works would otherwise hide.
		return Warning(noClusterPodCIDRRemedy, "%s; networking.clusterPodCIDR is empty, so the agent routes to no other node's pods", r.Message)
	})
}

const noClusterPodCIDRRemedy = "set networking.clusterPodCIDR to the cluster's pod range (the controller manager's --cluster-cidr), or ignore this on a cluster whose only bridge-mode flex node is this one"

// podCIDRSource says where this node's pod range comes from.
func podCIDRSource(ctx context.Context, e *Env) Result {
	n := &e.Config.Networking
	switch {
	case n.ClusterCNI():
		return OK("networking.mode cluster: the cluster's CNI gives the pods their addresses; the node is not Ready until its DaemonSet has written its config into %s in the machine", node.CNIConfDir)
	case n.PodCIDR != "":
		return OK("networking.podCIDR %s is this node's pod range", n.PodCIDR)
	case e.serverURL() == "":
		return OK("not checked: %s is empty", fqdnKey)
	}
	token, ok := e.readCredential(ctx)
	if !ok {
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: no credential to ask with")
	}
	p := fmt.Sprintf("/api/v1/nodes?limit=%d", podCIDRListLimit)
	code, body, err := e.apiRequest(ctx, http.MethodGet, p, token, nil)
	switch {
	case err != nil:
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: GET %s%s: %s (see %s)", e.serverURL(), p, redact(err, token), NameAPIServerReachable)
	case code == http.StatusForbidden:
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: the join credential may not list Nodes (403), and nothing else it may read says")
	case code != http.StatusOK:
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: GET %s%s answered %d", e.serverURL(), p, code)
	}
	return judgePodCIDRs(body)
}

const unknownPodCIDRRemedy = "nothing, if the controller manager runs with --allocate-node-cidrs (start then waits up to --join-timeout for the Node's spec.podCIDR after it registers); otherwise set networking.podCIDR to this node's range, or use networking.mode cluster with the cluster's CNI"

// judgePodCIDRs reads a NodeList: a Node with spec.podCIDR shows the
// controller manager allocates; Nodes and none with one show it does not
// (it sets each Node's within a moment of its registration), and start
// would fail after the join, waiting for a range that never comes.
func judgePodCIDRs(body []byte) Result {
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				PodCIDR string `json:"podCIDR"`
			} `json:"spec"`
		} `json:"items"`
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: the Node list does not parse: %v", err)
	}
	var with []string
	for _, it := range list.Items {
		if it.Spec.PodCIDR != "" {
			with = append(with, it.Metadata.Name+" "+it.Spec.PodCIDR)
		}
	}
	sort.Strings(with)
	read := fmt.Sprintf("%d Node(s)", len(list.Items))
	if list.Metadata.Continue != "" {
		read = fmt.Sprintf("the first %d Nodes", len(list.Items))
	}
	switch {
	case len(list.Items) == 0:
		return Warning(unknownPodCIDRRemedy, "cannot tell whether the cluster allocates node pod CIDRs: it has no Node yet to show one")
	case len(with) == 0:
		return Error("set networking.podCIDR to this node's range, run the controller manager with --allocate-node-cidrs and --cluster-cidr, or use networking.mode cluster with the cluster's CNI",
			"none of %s in the cluster carries spec.podCIDR: the controller manager does not allocate node pod CIDRs, and networking.podCIDR is empty, so this node would join without a pod network (networking.mode %s)", read, config.NetworkModeBridge)
	}
	return OK("the cluster allocates node pod CIDRs: %d of %s carry spec.podCIDR (%s); start takes this node's once it registers", len(with), read, strings.Join(with[:min(len(with), 3)], ", "))
}

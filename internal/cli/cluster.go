package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/identity"
)

func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "What a cluster must grant before nodes join it",
	}
	cmd.AddCommand(newClusterPrepareCommand())
	return cmd
}

var guidRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
})

// clusterPrepareLong is cluster prepare's help text, apart so
// newClusterPrepareCommand stays a screen of wiring.
const clusterPrepareLong = `Print the objects a cluster needs before a node joins it, for an admin to
apply with kubectl; nothing is sent to the cluster from here.

--bootstrap-token: a bootstrap token Secret (kube-system/bootstrap-token-<id>,
valid for --ttl, in the group ` + clusterprep.BootstrapGroup + `) and the
ClusterRoleBindings that let that group's kubelets bootstrap (create CSRs),
have their client CSRs approved without a human, and renew their own
certificates, and their agent read the Nodes and their kube-proxy (when
networking.kubeProxy is agent) read the Services and EndpointSlices as the
node. The token is generated, or read from --token-file when that
file exists; a new one is written there (mode 0600) when it does not, so the
same file feeds config generate and a re-run prints the same token.

--identity OBJECT_ID: the bindings that let the Entra identity with that
object ID (the username an AKS cluster gives it) bootstrap a kubelet and
nothing more: create the CSR for the node's client certificate and have it
approved. The kubelet and the agent then sign in with that certificate as
system:node:<name>, bounded by the Node authorizer, and renew it; the
bindings every node needs (renewal, reading Nodes, kube-proxy) are printed
too, as with --bootstrap-token. Versions before this one bound the identity
to the system:node role, which outside the Node authorizer is cluster-wide:
remove that binding (kubectl delete clusterrolebinding
aks-flex-node:node:OBJECT_ID aks-flex-node:node-proxier:OBJECT_ID).

--fleet: what nodes need to follow FlexNodeRollouts (flexnode.azure.com):
the CRDs of the rollouts and of their slots (FlexNodeSlot: a Lease under
another group, since the API server's NodeRestriction refuses nodes every
Lease outside kube-node-lease), the namespace ` + v1alpha1.Namespace + ` for the
slots, and, bound to the group system:nodes, read access to the rollouts,
update of their status, the slots in that namespace, read access to the
Nodes, and get (no list or watch) of ReplicaSets and StatefulSets, which a
soak reads to see that the pods its drain evicted are back (a node patches
its own Node's status under the Node authorizer already); a ValidatingAdmissionPolicy that lets a node write a slot only in
its own name and never release another node's; and a FlowSchema with its own
priority level that gives the agents' rollout requests their own seats, apart
from the kubelets'. It may be given with
--bootstrap-token or --identity, or alone.

Output holding a token is written mode 0600. Applying it twice changes
nothing but the token's expiry.

  aks-flex-node cluster prepare --bootstrap-token --token-file token --output prepare.yaml
  kubectl apply -f prepare.yaml
  aks-flex-node cluster prepare --identity 00000000-0000-0000-0000-000000000000 | kubectl apply -f -
  aks-flex-node cluster prepare --fleet | kubectl apply -f -`

func newClusterPrepareCommand() *cobra.Command {
	var bootstrap, fleet bool
	var objectID, tokenFile, output string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "prepare (--bootstrap-token [--token-file F] [--ttl D] | --identity OBJECT_ID | --fleet)... [--output -|FILE]",
		Short: "Print the Kubernetes objects an admin applies (kubectl apply -f) before nodes join",
		Long:  clusterPrepareLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var objs []any
			var header string
			switch {
			case bootstrap && objectID != "":
				return invalidf("give one of --bootstrap-token and --identity")
			case !bootstrap && objectID == "" && !fleet:
				return invalidf("give --bootstrap-token, --identity or --fleet")
			case !bootstrap && objectID == "": // --fleet alone: its objects follow
			case bootstrap:
				tok, err := prepareToken(tokenFile)
				if err != nil {
					return err
				}
				if ttl <= 0 {
					return invalidf("--ttl %v: must be positive", ttl)
				}
				expires := time.Now().Add(ttl)
				objs = clusterprep.BootstrapTokenObjects(tok, expires)
				header = fmt.Sprintf("aks-flex-node cluster prepare --bootstrap-token: token %s (valid until %s) and its bindings.\nApply with: kubectl apply -f <this file>", tok.ID, expires.UTC().Format(time.RFC3339))
			case objectID != "":
				if !guidRE().MatchString(objectID) {
					return invalidf("--identity %q: want the identity's object ID, a GUID", objectID)
				}
				// Entra writes object IDs in lowercase, and the username
				// the binding names must match it exactly.
				objectID = strings.ToLower(objectID)
				objs = clusterprep.IdentityObjects(objectID)
				header = fmt.Sprintf("aks-flex-node cluster prepare --identity %s: the identity may bootstrap a kubelet's client certificate, nothing more.\nApply with: kubectl apply -f <this file>", objectID)
			}
			if fleet {
				fobjs, err := clusterprep.FleetObjects()
				if err != nil {
					return err
				}
				objs = append(objs, fobjs...)
				header = strings.TrimSpace(header + "\n" + "aks-flex-node cluster prepare --fleet: the FlexNodeRollout and FlexNodeSlot CRDs, the " + v1alpha1.Namespace +
					" namespace for the slots, the nodes' RBAC for rollouts, and a FlowSchema for the agents' rollout requests.\nApply with: kubectl apply -f <this file>")
			}
			data, err := clusterprep.Render(header, objs)
			if err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, data)
		},
	}
	cmd.Flags().BoolVar(&bootstrap, "bootstrap-token", false, "prepare for nodes that join with a bootstrap token")
	cmd.Flags().StringVar(&objectID, "identity", "", "prepare for a node that joins with the Entra identity of this object ID")
	cmd.Flags().BoolVar(&fleet, "fleet", false, "also print what nodes need to follow FlexNodeRollouts: the CRDs, the slots' namespace, RBAC, a FlowSchema")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "with --bootstrap-token: read the token from this file, or write a new one to it (mode 0600)")
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "with --bootstrap-token: how long the token is valid")
	cmd.Flags().StringVarP(&output, "output", "o", "-", `where to write the objects: "-" for stdout, or a file (written 0600)`)
	return cmd
}

// prepareToken is the token of path, or a new one written there.
func prepareToken(path string) (clusterprep.BootstrapToken, error) {
	if path == "" {
		return clusterprep.NewBootstrapToken()
	}
	tok, err := readTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	if tok, err = clusterprep.NewBootstrapToken(); err != nil {
		return tok, err
	}
	if _, err := fsutil.WriteFile(path, []byte(tok.String()+"\n"), 0o600); err != nil {
		return tok, fmt.Errorf("write %s: %w", path, err)
	}
	return tok, nil
}

// readTokenFile reads a bootstrap token file, which must be 0600 and
// owned by root like any credential file.
func readTokenFile(path string) (clusterprep.BootstrapToken, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return clusterprep.BootstrapToken{}, err
	}
	if os.Geteuid() == 0 {
		if err := identity.CheckSecretFileInfo(path, fi); err != nil {
			return clusterprep.BootstrapToken{}, invalid(err)
		}
	} else if fi.Mode().Perm()&0o077 != 0 {
		return clusterprep.BootstrapToken{}, invalidf("%s has mode %04o: a token file must be mode 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return clusterprep.BootstrapToken{}, err
	}
	tok, err := clusterprep.ParseBootstrapToken(string(data))
	if err != nil {
		return tok, invalidf("%s: %v", path, err)
	}
	return tok, nil
}

// writeOutput writes data to stdout ("-") or to file, 0600 and atomically
// (the output may hold a credential).
func writeOutput(stdout io.Writer, file string, data []byte) error {
	if file == "-" || file == "" {
		_, err := stdout.Write(data)
		return err
	}
	if _, err := fsutil.WriteFile(file, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

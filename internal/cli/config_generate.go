package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/machineapi"
)

// generateOptions are config generate's flags.
type generateOptions struct {
	kubeconfig, auth, output               string
	tokenFile, clientID, tenantID          string
	secretFile, certificate, authorityHost string
	cloud, nodeName, hostPrefix, ociImage  string
	offlineArtifacts                       string
	// fromPool, armEndpoint and apiVersion: --from-pool's (see
	// config_generate_pool.go).
	fromPool, armEndpoint, apiVersion string
}

func newConfigGenerateCommand() *cobra.Command {
	var o generateOptions
	cmd := &cobra.Command{
		Use:   "generate (--kubeconfig K | --from-pool POOL-ID) --auth bootstrap-token|msi|sp|arc [...]",
		Short: "Write a config for joining the cluster of a kubeconfig (server and CA from it) or of an AKS agent pool",
		Long: `Write a validated config (mode 0600) that joins the cluster named by the
current context of --kubeconfig: node.kubelet.clusterFQDN and caCertData come
from its cluster; the rest from the flags. The same flags write the same
bytes, so a re-run changes nothing.

--from-pool /subscriptions/S/resourceGroups/G/providers/Microsoft.ContainerService/managedClusters/C/agentPools/P
instead asks AKS: the --auth identity (msi, sp or arc) calls the pool's
listBootstrapData action ([--resource-manager-endpoint URL] [--api-version V])
and the config is the pool's join data (server, CA, bootstrap token, versions,
the pool's labels, taints and maxPods, the target cluster and pool) with that
identity for Azure Resource Manager, so the node registers its AKS Machine.

--auth bootstrap-token   --token-file F (what cluster prepare --bootstrap-token wrote)
--auth msi               [--client-id ID] (a user-assigned identity; default system-assigned)
--auth sp                --tenant-id T --client-id ID and --client-secret-file F or
                         --client-certificate PATH [--authority-host URL | --cloud C]
--auth arc               the Arc agent's identity (the host is connected with azcmagent)

Secrets are read from files, never from the command line, where other users
could see them in the process list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := o.generate(cmd.Context())
			if err != nil {
				return err
			}
			data, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return err
			}
			data = append(data, '\n')
			name := o.output
			if name == "-" {
				name = "generated config"
			}
			if o.fromPool != "" {
				name += " (agent pool " + o.fromPool + "'s bootstrap data)"
			}
			if _, err := config.Parse(name, data); err != nil {
				return invalid(err)
			}
			return writeOutput(cmd.OutOrStdout(), o.output, data)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (its current context's server and CA are used)")
	f.StringVar(&o.auth, "auth", "", "how the node signs in: bootstrap-token, msi, sp or arc")
	f.StringVarP(&o.output, "output", "o", "-", `where to write the config: "-" for stdout, or a file (written 0600)`)
	f.StringVar(&o.tokenFile, "token-file", "", "bootstrap-token: the file holding the token")
	f.StringVar(&o.clientID, "client-id", "", "msi: a user-assigned identity's client ID; sp: the application ID")
	f.StringVar(&o.tenantID, "tenant-id", "", "sp: the tenant ID")
	f.StringVar(&o.secretFile, "client-secret-file", "", "sp: a file holding the client secret")
	f.StringVar(&o.certificate, "client-certificate", "", "sp: the host path of the certificate file (PEM or PKCS#12, mode 0600)")
	f.StringVar(&o.authorityHost, "authority-host", "", "sp: the Entra authority (sovereign or private clouds)")
	f.StringVar(&o.cloud, "cloud", "", "azure.cloud: AzurePublicCloud, AzureChinaCloud or AzureUSGovernmentCloud")
	f.StringVar(&o.nodeName, "node-name", "", "agent.nodeName (default: the host's name when the config is loaded)")
	f.StringVar(&o.hostPrefix, "host-prefix", "", "agent.hostPrefix (e.g. /opt/aks-flex-node on Azure Container Linux)")
	f.StringVar(&o.ociImage, "oci-image", "", "bootstrap.ociImage, the worker image")
	f.StringVar(&o.offlineArtifacts, "offline-artifacts", "", "bootstrap.offlineArtifacts.source")
	f.StringVar(&o.fromPool, "from-pool", "", "an AKS agent pool's resource ID: the config comes from its listBootstrapData action")
	f.StringVar(&o.armEndpoint, "resource-manager-endpoint", "", "--from-pool: the ARM endpoint (default: --cloud's); written as azure.resourceManagerEndpoint")
	f.StringVar(&o.apiVersion, "api-version", "", "--from-pool: listBootstrapData's api-version (default "+machineapi.BootstrapDataAPIVersion+")")
	return cmd
}

// generate is the config the flags describe: from a kubeconfig, or from
// an agent pool's bootstrap data.
func (o *generateOptions) generate(ctx context.Context) (map[string]any, error) {
	switch {
	case o.fromPool != "" && o.kubeconfig != "":
		return nil, invalidf("--from-pool and --kubeconfig: give one (the pool's bootstrap data names the server and CA)")
	case o.fromPool != "":
		return o.poolDocument(ctx)
	case o.armEndpoint != "" || o.apiVersion != "":
		return nil, invalidf("--resource-manager-endpoint and --api-version are --from-pool's")
	}
	return o.document()
}

// document is the config the flags describe, in the config's own schema.
func (o *generateOptions) document() (map[string]any, error) {
	if o.kubeconfig == "" {
		return nil, invalidf("--kubeconfig or --from-pool is required")
	}
	server, ca, err := clusterOf(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	azure, err := o.azure()
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"azure": azure,
		"node":  map[string]any{"kubelet": map[string]any{"clusterFQDN": server, "caCertData": base64.StdEncoding.EncodeToString(ca)}},
	}
	o.hostSections(doc)
	return doc, nil
}

// hostSections sets what the flags say about the host (agent.nodeName,
// agent.hostPrefix, the bootstrap sources) over doc's sections.
func (o *generateOptions) hostSections(doc map[string]any) {
	section := func(name string) map[string]any {
		m, ok := doc[name].(map[string]any)
		if !ok {
			m = map[string]any{}
		}
		return m
	}
	set := func(name string, m map[string]any) {
		if len(m) > 0 {
			doc[name] = m
		}
	}
	agent := section("agent")
	if o.nodeName != "" {
		agent["nodeName"] = o.nodeName
	}
	if o.hostPrefix != "" {
		agent["hostPrefix"] = o.hostPrefix
	}
	set("agent", agent)
	bootstrap := section("bootstrap")
	if o.ociImage != "" {
		bootstrap["ociImage"] = o.ociImage
	}
	if o.offlineArtifacts != "" {
		bootstrap["offlineArtifacts"] = map[string]any{"source": o.offlineArtifacts}
	}
	set("bootstrap", bootstrap)
}

// azure is the azure section for --auth.
func (o *generateOptions) azure() (map[string]any, error) {
	a := map[string]any{}
	if o.cloud != "" {
		a["cloud"] = o.cloud
	}
	switch o.auth {
	case "bootstrap-token":
		if o.tokenFile == "" {
			return nil, invalidf("--auth bootstrap-token needs --token-file (aks-flex-node cluster prepare --bootstrap-token --token-file F writes one)")
		}
		tok, err := readTokenFile(o.tokenFile)
		if err != nil {
			return nil, err
		}
		a["bootstrapToken"] = map[string]any{"token": tok.String()}
	case "msi":
		mi := map[string]any{}
		if o.clientID != "" {
			mi["clientId"] = o.clientID
		}
		a["managedIdentity"] = mi
	case "sp":
		sp := map[string]any{"tenantId": o.tenantID, "clientId": o.clientID}
		switch {
		case (o.secretFile == "") == (o.certificate == ""):
			return nil, invalidf("--auth sp needs one of --client-secret-file and --client-certificate")
		case o.secretFile != "":
			data, err := identity.ReadSecretFile("/")(o.secretFile)
			if err != nil {
				return nil, invalid(fmt.Errorf("--client-secret-file: %w", err))
			}
			sp["clientSecret"] = strings.TrimRight(string(data), "\r\n")
		default:
			sp["clientCertificatePath"] = o.certificate
		}
		if o.authorityHost != "" {
			a["authorityHost"] = o.authorityHost
		}
		a["servicePrincipal"] = sp
	case "arc":
		a["arc"] = map[string]any{"enabled": true}
	default:
		return nil, invalidf("--auth %q: want bootstrap-token, msi, sp or arc", o.auth)
	}
	return a, nil
}

// clusterOf reads the server (as host:port) and CA of the current
// context's cluster in a kubeconfig.
func clusterOf(path string) (server string, ca []byte, err error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", nil, invalidf("--kubeconfig %s: no current context", path)
	}
	cl, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return "", nil, invalidf("--kubeconfig %s: context %s names cluster %q, which it does not have", path, cfg.CurrentContext, ctx.Cluster)
	}
	ca = cl.CertificateAuthorityData
	if len(ca) == 0 && cl.CertificateAuthority != "" {
		if ca, err = os.ReadFile(cl.CertificateAuthority); err != nil {
			return "", nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
	}
	if len(ca) == 0 {
		return "", nil, invalidf("--kubeconfig %s: cluster %s has no certificate authority; the node trusts only the cluster's CA", path, ctx.Cluster)
	}
	u, err := url.Parse(cl.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", nil, invalidf("--kubeconfig %s: cluster %s server %q is not an https URL", path, ctx.Cluster, cl.Server)
	}
	if _, err := config.ServerURL(cl.Server); err != nil {
		return "", nil, invalidf("--kubeconfig %s: cluster %s server: %v", path, ctx.Cluster, err)
	}
	return u.Host, ca, nil
}

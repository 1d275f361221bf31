package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/identity"
)

func newTokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Credentials for the cluster's API server",
	}
	cmd.AddCommand(newTokenKubeloginCommand())
	return cmd
}

// tokenTimeout bounds one plugin call: the kubelet waits for it.
const tokenTimeout = 60 * time.Second

func newTokenKubeloginCommand() *cobra.Command {
	var path, dir, serverID string
	cmd := &cobra.Command{
		Use:   "kubelogin",
		Short: "Print an ExecCredential with an Entra token for the API server (a kubeconfig exec plugin)",
		Long: `An exec credential plugin (client.authentication.k8s.io/v1): print an
ExecCredential whose status holds a Microsoft Entra access token for
--server-id (the AKS AAD server application by default), obtained with the
identity the config names (azure.managedIdentity, azure.servicePrincipal or
azure.arc). The kubelet's kubeconfig runs it (with --identity-dir, the dir
start binds into the machine); it also works by hand.

Tokens are cached in the state dir (identity/tokens, mode 0600) and shared
by every caller of the same identity; a cached token is handed out until it
is due for refresh (5 minutes before it expires, or half-way through a
shorter life), which is also the expirationTimestamp the client is given,
so it asks again in time. Errors go to stderr and name the identity, its
tenant, client and endpoint, with the endpoint's own answer (AADSTS codes
included); they never contain a secret or a token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := identity.CheckExecInfo(os.Getenv(identity.ExecInfoEnv)); err != nil {
				return invalid(err)
			}
			src, err := tokenSource(path, dir, cmd.Flags().Changed("config"))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			tok, _, err := src.Token(ctx, serverID)
			if err != nil {
				return fmt.Errorf("token kubelogin: %w", err)
			}
			return identity.WriteExecCredential(cmd.OutOrStdout(), tok)
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVar(&dir, "identity-dir", "", "read the identity from this identity dir (what start writes and binds into the machine) instead of the config")
	cmd.Flags().StringVar(&serverID, "server-id", identity.AKSServerID, "the application ID of the API server the token is for")
	return cmd
}

// tokenSource is the identity and cache the plugin uses: those of an
// identity dir, or those of the config.
func tokenSource(path, dir string, configGiven bool) (*identity.Source, error) {
	if dir != "" {
		if configGiven {
			return nil, invalidf("--config and --identity-dir: give one")
		}
		s, err := identity.LoadDir(dir)
		if err != nil {
			return nil, err
		}
		return &identity.Source{Spec: s, Cache: identity.DirCache(dir)}, nil
	}
	c, err := loadConfig(path, io.Discard) // the kubelet reads this plugin's output
	if err != nil {
		return nil, err
	}
	s, ok, err := identity.FromConfig(c, identity.ReadSecretFile("/"))
	if err == nil && ok {
		err = identity.CheckConfigFile(path, c.Azure.ServicePrincipal)
	}
	switch {
	case errors.Is(err, identity.ErrLooseSecretFile):
		return nil, invalid(err)
	case err != nil:
		return nil, fmt.Errorf("token kubelogin: %w", err)
	case !ok:
		return nil, invalidf("config %s joins with azure.bootstrapToken; token kubelogin needs azure.managedIdentity, azure.servicePrincipal or azure.arc", path)
	}
	l, err := c.Layout("/", path)
	if err != nil {
		return nil, invalid(err)
	}
	return &identity.Source{Spec: s, Cache: identity.DirCache(l.OnRoot(l.IdentityDir()))}, nil
}

package cli

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/artifact"
)

func newImagePushCommand() *cobra.Command {
	var arch string
	var plainHTTP bool
	cmd := &cobra.Command{
		Use:   "push SRC oci://registry/repository:tag",
		Short: "Push a worker image to a registry",
		Long: `Push the linux/<arch> image of SRC (an 'image build' output dir, or
oci-layout:///dir:tag or @sha256:...) to a registry, and print the reference
pinned by its manifest digest: what bootstrap.ociImage should say.

The push follows the transport policy (https; plain HTTP only to a loopback
registry or with --plain-http) and uses the Docker config's credentials.
Exit status: 0 pushed, 1 failed, 2 bad usage.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if arch == "" {
				arch = runtime.GOARCH
			}
			reg := artifact.Registry{PlainHTTP: plainHTTP}
			ref, err := reg.ParseReference(args[1])
			if err != nil {
				return invalid(fmt.Errorf("image push: %w", err))
			}
			d, err := reg.PushImage(cmd.Context(), args[0], arch, args[1])
			if err != nil {
				return fmt.Errorf("image push: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s to %s@%s\n", args[0], strings.TrimPrefix(ref.Context().String(), artifact.OCIScheme), d)
			return nil
		},
	}
	cmd.Flags().StringVar(&arch, "arch", "", "the arch of the image to push (default: this host's)")
	cmd.Flags().BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a registry that is not on loopback")
	return cmd
}

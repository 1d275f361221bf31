package cli

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
)

func newArtifactsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "Build, publish and check offline bootstrap bundles",
		Long: `Offline bootstrap bundles hold the node components (kubelet, kubectl,
containerd, runc, CNI plugins, crictl) and container image archives for one
Kubernetes version and arch, in the layout bootstrap.offlineArtifacts.source
consumes (docs/offline-bundle.md). Build one with 'artifacts build', publish
it to a registry with 'artifacts push', and check one with 'artifacts verify'.`,
	}
	cmd.AddCommand(newArtifactsBuildCommand(), newArtifactsPushCommand(), newArtifactsVerifyCommand())
	return cmd
}

func newArtifactsBuildCommand() *cobra.Command {
	var spec, out, arch, from, legal, worker, bundleLayout string
	var plainHTTP bool
	cmd := &cobra.Command{
		Use:   "build --manifest M --output-dir D",
		Short: "Build an offline bundle from a spec, from a local tree or the upstream release sites",
		Long: `Build the bundle the spec M describes (schemaVersion, arch, component
versions and image archives; format in docs/offline-bundle.md) into D, which
must be absent or empty: every file with its .sha256 and manifest.json.

With --from-dir SRC every file is copied from SRC at its bundle path (a mirror
of the upstream download paths, image archives under images/); a <file>.sha256
next to a source file must agree with it. Without it, components are
downloaded from the upstream release sites, each SHA-256 verified against the
upstream checksum file, and image archives are pulled from their references.

--legal-files-dir L (default: none) ships L's LICENSE (required) and its
NOTICE/THIRD_PARTY_NOTICES files (optional: their absence is a note) under
legal/, listed in the manifest with checksums.

--worker-image W carries the worker image in the bundle under images/worker/
(an OCI image layout of that one image for the bundle's arch, with the image
build's lock file and SBOM when W has them), named by digest in the
manifest's workerImage; start uses it when bootstrap.ociImage is empty. W is
an 'image build' output dir or any OCI layout holding one image, or
oci-layout:///dir:tag.

--layout upstream writes upstream AKS Flex Node's layout instead (the one its
agent-artifacts-builder writes: cni/ and crictl/ directories, kube-proxy next to
the kubelet, image archives under container-images/<arch>/, and a manifest.json
of versions and image references; docs/offline-bundle.md). It needs
components.crictl, and has no place for --worker-image or --legal-files-dir.
With --from-dir, a bundle in the other layout serves as the source tree, so
build converts between the two (kube-proxy, which this product's layout lacks,
must be in SRC at upstream's path). verify, preflight and start read either.

The same inputs give a byte-identical bundle. Exit status: 0 built, 1 failed,
2 bad usage or an invalid spec.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec == "" || out == "" {
				return invalidf("artifacts build: --manifest and --output-dir are required")
			}
			if arch != "" && arch != "amd64" && arch != "arm64" {
				return invalidf("artifacts build: --arch %q: must be amd64 or arm64", arch)
			}
			if err := artifact.ValidLayout(bundleLayout); err != nil {
				return invalidf("artifacts build: --layout: %v", err)
			}
			s, err := artifact.LoadSpec(spec)
			if err != nil {
				if os.IsNotExist(err) {
					return invalidf("artifacts build: --manifest: %v", err)
				}
				return invalid(fmt.Errorf("artifacts build: %w", err))
			}
			if s.Arch == "" && arch == "" {
				arch = runtime.GOARCH
			}
			reg := artifact.Registry{PlainHTTP: plainHTTP}
			m, err := artifact.Build(cmd.Context(), artifact.BuildOptions{
				Spec: s, Arch: arch, OutputDir: out, FromDir: from, LegalDir: legal,
				PullImage: reg.PullImageArchive, WorkerImage: worker, Layout: bundleLayout,
				Note: func(n string) { fmt.Fprintln(cmd.ErrOrStderr(), n) },
			})
			if err != nil {
				return fmt.Errorf("artifacts build: %w", err)
			}
			wi := ""
			if m.WorkerImage != nil {
				wi = ", worker image " + m.WorkerImage.Digest
			}
			fmt.Fprintf(cmd.OutOrStdout(), "built %s: kubernetes %s %s, %d files, %d images, %d legal files%s%s\n", out, m.Components.Kubernetes, m.Arch, len(m.Files), len(m.Images), len(m.Legal), wi, layoutNote(m.Layout))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec, "manifest", "", "build spec: what the bundle holds (JSON, docs/offline-bundle.md)")
	f.StringVar(&out, "output-dir", "", "where to write the bundle (absent or empty)")
	f.StringVar(&arch, "arch", "", "amd64 or arm64 (default: the spec's arch, else this host's)")
	f.StringVar(&from, "from-dir", "", "local source tree with the bundle's paths (default: download from upstream)")
	f.StringVar(&worker, "worker-image", "", "worker image to carry under images/worker/: an OCI layout dir (an 'image build' output) or oci-layout:///dir:tag")
	f.StringVar(&legal, "legal-files-dir", "", "directory with LICENSE (required) and NOTICE files (optional) to ship; empty ships none")
	f.BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a non-loopback registry when pulling image archives")
	f.StringVar(&bundleLayout, "layout", artifact.LayoutNative, "bundle layout to write: native (this product's) or upstream (upstream AKS Flex Node's)")
	return cmd
}

func newArtifactsPushCommand() *cobra.Command {
	var dir string
	var plainHTTP bool
	cmd := &cobra.Command{
		Use:   "push --dir D oci://REGISTRY/REPOSITORY:TAG",
		Short: "Publish a bundle to an OCI registry",
		Long: `Verify the bundle in D and push it as one OCI artifact: manifest.json is the
config blob and every other file is one uncompressed layer titled with its
path (docs/offline-bundle.md), so each layer digest is the file's SHA-256.
Plain HTTP is used only for loopback registries unless --plain-http is set.
Credentials come from the docker config (~/.docker/config.json).
Prints the artifact's digest. Exit status: 0 pushed, 1 failed, 2 bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return invalidf("artifacts push: --dir is required")
			}
			reg := artifact.Registry{PlainHTTP: plainHTTP}
			if _, err := reg.ParseReference(args[0]); err != nil {
				return invalid(fmt.Errorf("artifacts push: %w", err))
			}
			d, err := reg.Push(cmd.Context(), dir, args[0])
			if err != nil {
				return fmt.Errorf("artifacts push: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s to %s@%s\n", dir, strings.TrimPrefix(args[0], artifact.OCIScheme), d)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the bundle directory")
	cmd.Flags().BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a non-loopback registry")
	return cmd
}

func newArtifactsVerifyCommand() *cobra.Command {
	var source, version, cfgPath, arch, root string
	var plainHTTP, quick bool
	cmd := &cobra.Command{
		Use:   "verify --source S",
		Short: "Check a bundle the way start would",
		Long: `Check the bundle at S (a path, file:///path or oci://registry/repository:tag;
a Go template over .KubernetesVersion) the way start does: the manifest's arch
and versions match (the config's components with --config, else
--kubernetes-version), every file is present with the manifest's size and
SHA-256 and its .sha256 agrees, and image archives read as image archives.
A directory in upstream AKS Flex Node's layout (detected from its
manifest.json) is read too: its files are the ones upstream's layout has for
the manifest's versions and images, kube-proxy included, and each must hash to
its .sha256, the only checksum that layout has. An
oci:// bundle is checked against its registry index first (every layer digest
must be the manifest's checksum), then every file is streamed from the
registry through the same checks; nothing is written to disk.

With --quick, a bundle is checked through the verification record start
keeps in the state dir: one whose files (device, inode, size, mtime, ctime)
and manifest are as they were when it was last hashed in full is not hashed
again; any other is hashed in full and its record replaced. For an oci://
source the copy staged on this host is checked that way (the registry is
asked for the artifact's manifest only); one not staged here is checked
against the registry in full. Without --quick every byte is hashed.

Without --source, --config's bootstrap.offlineArtifacts.source is checked.
Prints one line per problem. Exit status: 0 good, 1 problems found, 2 bad
usage or an invalid config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var want artifact.Components
			if cfgPath != "" {
				c, err := loadConfig(cfgPath, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				want = lifecycle.WantComponents(c)
				if source == "" {
					source = c.Bootstrap.OfflineArtifacts.Source
				}
				plainHTTP = plainHTTP || c.Bootstrap.OfflineArtifacts.PlainHTTP
				if version != "" && strings.TrimPrefix(version, "v") != strings.TrimPrefix(want.Kubernetes, "v") {
					return invalidf("artifacts verify: --kubernetes-version %s disagrees with components.kubernetes %s in %s", version, want.Kubernetes, cfgPath)
				}
			} else {
				want.Kubernetes = version
			}
			if source == "" {
				return invalidf("artifacts verify: --source is required (or --config with bootstrap.offlineArtifacts.source)")
			}
			if strings.Contains(source, "{{") && want.Kubernetes == "" {
				return invalidf("artifacts verify: --source %q is a template: give --kubernetes-version or --config", source)
			}
			src, err := artifact.ResolveSource(source, strings.TrimPrefix(want.Kubernetes, "v"))
			if err != nil {
				return invalid(fmt.Errorf("artifacts verify: %w", err))
			}
			// A reference that does not parse (no tag, say) is bad usage,
			// not a bundle problem.
			if strings.HasPrefix(src, artifact.OCIScheme) {
				if _, err := (artifact.Registry{PlainHTTP: plainHTTP}).ParseReference(src); err != nil {
					return invalid(fmt.Errorf("artifacts verify: --source: %w", err))
				}
			}
			out := cmd.OutOrStdout()
			if quick {
				done, err := verifyQuick(cmd, src, root, want, arch, plainHTTP)
				if done || err != nil {
					return err
				}
			}
			ps, n, bl, err := verifySource(cmd.Context(), src, want, arch, plainHTTP)
			if err != nil {
				return err
			}
			for _, p := range ps {
				fmt.Fprintln(out, oneLine(p.Error()))
			}
			if len(ps) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: artifacts verify: %s: %d problem(s)\n", src, len(ps))
				return &exitError{code: ExitFailure, err: errSilent}
			}
			fmt.Fprintf(out, "%s: verified, %d files%s\n", src, n, layoutNote(bl))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "bundle: path, file:///path or oci://registry/repository:tag")
	f.StringVar(&version, "kubernetes-version", "", "Kubernetes version the bundle must hold (and the template's .KubernetesVersion)")
	f.StringVarP(&cfgPath, "config", "c", "", "compare with this config's components (and default --source to its bootstrap.offlineArtifacts.source)")
	f.StringVar(&arch, "arch", runtime.GOARCH, "arch the bundle must be for")
	f.BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a non-loopback registry")
	f.BoolVar(&quick, "quick", false, "skip hashing a bundle unchanged since its last full verification on this host")
	f.StringVar(&root, "root", "/", "root directory of the host tree whose state dir holds the verification records")
	return cmd
}

// verifyQuick checks src through its verification record (a local bundle,
// or the copy of a registry bundle staged on this host) and prints the
// result. done is false when there is no local copy to check, and the
// caller checks src in full.
func verifyQuick(cmd *cobra.Command, src, root string, want artifact.Components, arch string, plainHTTP bool) (done bool, err error) {
	l, err := layout.New(root, "", "")
	if err != nil {
		return true, invalid(fmt.Errorf("artifacts verify: --root: %w", err))
	}
	hashed := artifact.BytesHashed()
	st := &artifact.Stager{Layout: l, Want: want, Arch: arch, PlainHTTP: plainHTTP}
	dir := l.OnRoot(src)
	if strings.HasPrefix(src, artifact.OCIScheme) {
		var staged bool
		if dir, staged, err = st.StagedDir(cmd.Context(), src); err != nil {
			fmt.Fprintln(cmd.OutOrStdout(), oneLine(err.Error()))
			fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: artifacts verify: %s: does not verify\n", src)
			return true, &exitError{code: ExitFailure, err: errSilent}
		} else if !staged {
			fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: artifacts verify: %s is not staged on this host: checking it in the registry\n", src)
			return false, nil
		}
	}
	v, err := st.VerifyQuick(cmd.Context(), dir)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(cmd.OutOrStdout(), line)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: artifacts verify: %s: does not verify\n", dir)
		return true, &exitError{code: ExitFailure, err: errSilent}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (%d bytes hashed)\n", dir, v, artifact.BytesHashed()-hashed)
	return true, nil
}

// verifySource checks a resolved source; the error is for failures to
// check at all (a problem with the bundle is a Problem).
func verifySource(ctx context.Context, src string, want artifact.Components, arch string, plainHTTP bool) (ps []artifact.Problem, n int, bundleLayout string, err error) {
	if !strings.HasPrefix(src, artifact.OCIScheme) {
		m, ps := artifact.VerifyFor(ctx, src, want, arch)
		if m != nil {
			n, bundleLayout = len(m.Files)+len(m.Legal), m.Layout
		}
		return ps, n, bundleLayout, nil
	}
	reg := artifact.Registry{PlainHTTP: plainHTTP}
	rem, ps := reg.Inspect(ctx, src, want, arch)
	if len(ps) > 0 {
		return ps, 0, "", nil
	}
	return reg.VerifyRemote(ctx, rem), len(rem.Manifest.Files) + len(rem.Manifest.Legal), rem.Manifest.Layout, nil
}

// oneLine keeps a problem on one output line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// layoutNote says so when a bundle is in upstream's layout; this
// product's own needs no note.
func layoutNote(l string) string {
	if l == artifact.LayoutUpstream {
		return ", upstream's layout"
	}
	return ""
}

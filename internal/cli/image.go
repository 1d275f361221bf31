package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/image/deb"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/transport"
)

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build and check worker machine images",
		Long: `The worker image is the root file system of the node's machine: systemd and
the tools kubelet and the CNI plugins call, without kubelet or containerd
(the offline bundle installs those). 'image build' assembles one from a
Debian or Ubuntu archive's signed packages, or packs an existing rootfs;
'image check' checks any image against the worker image contract.`,
	}
	cmd.AddCommand(newImageBuildCommand(), newImageCheckCommand(), newImagePushCommand())
	return cmd
}

func newImageBuildCommand() *cobra.Command {
	var specPath, out, lockPath, arch, mirror, fromRootfs, cacheDir string
	var plainHTTP bool
	cmd := &cobra.Command{
		Use:   "build --spec F --output-dir D",
		Short: "Build a worker image from signed Debian/Ubuntu packages, or pack a rootfs",
		Long: `Build the worker image the spec F describes into D (absent or empty): an OCI
image layout (one layer, linux/<arch>), worker.lock.json and sbom.spdx.json.

The archive's InRelease is checked against the spec's keyring, the Packages
indexes and every .deb against the hashes it signs; a mismatch names the file.
The spec's packages, the Essential ones and their dependencies are resolved
to a closed set, unpacked without running maintainer scripts (no root,
chroot or debootstrap), and the builder does what the image needs from those
scripts itself. With --lock L the build uses exactly L's package files
(fetched by path, checked against L's SHA-256s): the same lock and spec give
a byte-identical image. Fetched files are cached by SHA-256 in --cache-dir.

The spec names no mirror host unless its author wrote one: --mirror URL
gives the archive root (the directory holding dists/ and pool/). Plain HTTP
is used only for a loopback mirror, or with --plain-http (the signatures and
hashes are checked either way).

--from-rootfs DIR packs an existing root file system the same deterministic
way instead (every mtime from SOURCE_DATE_EPOCH, default 2000-01-01; the
spec, if given, names the image).

Exit status: 0 built, 1 failed, 2 bad usage or an invalid spec.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return invalidf("image build: --output-dir is required")
			}
			if arch != "" && arch != "amd64" && arch != "arm64" {
				return invalidf("image build: --arch %q: must be amd64 or arm64", arch)
			}
			logf := func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }
			var spec *image.Spec
			if specPath != "" {
				s, err := image.LoadSpec(specPath)
				if err != nil {
					if os.IsNotExist(err) {
						return invalidf("image build: --spec: %v", err)
					}
					return invalid(fmt.Errorf("image build: %w", err))
				}
				spec = s
			}
			if fromRootfs != "" {
				return packRootfs(cmd, fromRootfs, out, arch, spec, logf)
			}
			if spec == nil {
				return invalidf("image build: --spec is required (or --from-rootfs)")
			}
			o := image.Options{Spec: spec, Arch: arch, Mirror: mirror, OutputDir: out, Log: logf, Tool: "aks-flex-node " + buildinfo.Version}
			if lockPath != "" {
				l, err := image.LoadLock(lockPath)
				if err != nil {
					return invalid(fmt.Errorf("image build: --lock: %w", err))
				}
				o.Lock = l
			}
			m := mirror
			if m == "" {
				m = spec.Mirror
			}
			get, err := mirrorGetter(m, plainHTTP)
			if err != nil {
				return invalid(fmt.Errorf("image build: %w", err))
			}
			o.Get = get
			if o.CacheDir, err = imageCacheDir(cacheDir); err != nil {
				return err
			}
			start := time.Now()
			res, err := image.Build(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("image build: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "built %s in %s: %s (%s), %d packages, layer %.1f MB; lock %s, SBOM %s\n",
				res.Dir, time.Since(start).Round(time.Millisecond), res.Ref(), res.Digest, res.Packages, float64(res.Layer.Size)/1e6,
				filepath.Join(res.Dir, image.LockFileName), filepath.Join(res.Dir, image.SBOMFileName))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&specPath, "spec", "", "image spec (JSON; examples/worker-image/bookworm.json is the default image's)")
	f.StringVar(&out, "output-dir", "", "where to write the image layout, lock and SBOM (absent or empty)")
	f.StringVar(&lockPath, "lock", "", "build exactly this worker.lock.json's packages")
	f.StringVar(&arch, "arch", "", "amd64 or arm64 (default: the spec's, else this host's)")
	f.StringVar(&mirror, "mirror", "", "archive root URL (overrides the spec's mirror)")
	f.StringVar(&fromRootfs, "from-rootfs", "", "pack this existing root file system instead of building one")
	f.StringVar(&cacheDir, "cache-dir", "", "where fetched indexes and packages are kept by SHA-256 (default: the user cache dir)")
	f.BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a mirror that is not on loopback")
	return cmd
}

func packRootfs(cmd *cobra.Command, dir, out, arch string, spec *image.Spec, logf func(string)) error {
	created := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return invalidf("image build: SOURCE_DATE_EPOCH %q is not a number of seconds", s)
		}
		created = time.Unix(n, 0).UTC()
	}
	o := image.RootfsOptions{Dir: dir, OutputDir: out, Arch: arch, Created: created, Log: logf, Tool: "aks-flex-node " + buildinfo.Version}
	if spec != nil {
		o.Name, o.Description, o.Tag = spec.Name, spec.Description, spec.Tag
		if o.Arch == "" {
			o.Arch = spec.Arch
		}
	}
	res, err := image.PackRootfs(cmd.Context(), o)
	if err != nil {
		return fmt.Errorf("image build: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "packed %s into %s: %s (%s), layer %.1f MB; SBOM %s\n",
		dir, res.Dir, res.Ref(), res.Digest, float64(res.Layer.Size)/1e6, filepath.Join(res.Dir, image.SBOMFileName))
	return nil
}

// imageCacheDir is --cache-dir, else <user cache dir>/aks-flex-node/image.
func imageCacheDir(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("image build: no cache dir (%w): give --cache-dir", err)
	}
	return filepath.Join(d, "aks-flex-node", "image"), nil
}

// mirrorGetter fetches from the mirror under the transport policy:
// https, plain HTTP only to loopback or, with --plain-http, to the
// mirror's own host (what is fetched is checked against the signed
// indexes either way).
func mirrorGetter(mirror string, plainHTTP bool) (deb.Getter, error) {
	pol := transport.Policy{OptIn: "--plain-http"}
	if mirror != "" {
		u, err := url.Parse(mirror)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--mirror %q is not a URL", mirror)
		}
		if plainHTTP {
			pol.PlainHTTPHost = u.Host
		}
	}
	return pol.Get, nil
}

func newImageCheckCommand() *cobra.Command {
	var arch, output, cfgPath string
	var plainHTTP bool
	cmd := &cobra.Command{
		Use:   "check REF",
		Short: "Check an image against the worker image contract",
		Long: `Check the image REF against the worker image contract, the way start's
worker-image preflight check does: REF is oci-layout:///dir:tag (or @sha256:...),
an OCI layout dir holding one image (an 'image build' output), or a registry
reference (registry/repository:tag or @sha256:..., oci:// optional). The config
and every layer are read (layers are streamed and hashed against their diff
IDs, their tar headers read; nothing is written) and each contract item is
reported:

` + contractHelp() + `
The iptables item is for the default config (bridge networking, whose
portmap CNI plugin calls iptables); with --config the contract follows that
config: iptables for bridge networking or the agent's kube-proxy in iptables
mode, nft for its nftables mode, either one otherwise.

Registry pulls follow the transport policy (https; plain HTTP only to a
loopback registry or with --plain-http) and use the Docker config's
credentials. Exit status: 0 the image meets the contract (and is for --arch),
1 it does not or could not be read, 2 bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if arch == "" {
				arch = runtime.GOARCH
			}
			ref, err := imageRef(args[0])
			if err != nil {
				return invalid(fmt.Errorf("image check: %w", err))
			}
			l, err := layout.New("/", "", "")
			if err != nil {
				return err
			}
			p := &machine.Provisioner{PlainHTTP: plainHTTP, Keychain: authn.DefaultKeychain, Platform: v1.Platform{OS: "linux", Architecture: arch}}
			if cfgPath != "" {
				c, err := loadConfig(cfgPath, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				needs := lifecycle.ImageNeeds(c)
				p.Needs = &needs
			}
			in, err := p.Inspect(cmd.Context(), l, ref)
			if err != nil {
				return fmt.Errorf("image check: %s: %w", ref, err)
			}
			return reportImageCheck(cmd, ref, in, output)
		},
	}
	cmd.Flags().StringVar(&arch, "arch", "", "the arch the image must be for (default: this host's)")
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "judge the image for the node this config file describes (default: the default config's needs)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&plainHTTP, "plain-http", false, "allow plain HTTP to a registry that is not on loopback")
	return cmd
}

// contractHelp lists the contract items for the help text, from the
// contract itself.
func contractHelp() string {
	var b strings.Builder
	for _, it := range image.Contract {
		fmt.Fprintf(&b, "  %-16s %s\n", it.Name, it.What)
	}
	return b.String()
}

// imageRef turns what image check takes into a reference the provisioner
// resolves: an OCI layout dir holding one image becomes
// oci-layout:///dir@digest, oci://x becomes x.
func imageRef(s string) (string, error) {
	if r, ok := strings.CutPrefix(s, "oci://"); ok {
		return r, nil
	}
	if strings.HasPrefix(s, machine.OCILayoutScheme) {
		return s, nil
	}
	if fi, err := os.Stat(s); err == nil && fi.IsDir() {
		abs, err := filepath.Abs(s)
		if err != nil {
			return "", err
		}
		lp, err := ocilayout.FromPath(abs)
		if err != nil {
			return "", fmt.Errorf("%s: not an OCI image layout: %w", s, err)
		}
		idx, err := lp.ImageIndex()
		if err != nil {
			return "", err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return "", err
		}
		if len(im.Manifests) != 1 {
			return "", fmt.Errorf("%s holds %d images: name one as oci-layout://%s:TAG", s, len(im.Manifests), abs)
		}
		return machine.OCILayoutScheme + abs + "@" + im.Manifests[0].Digest.String(), nil
	}
	return s, nil
}

func reportImageCheck(cmd *cobra.Command, ref string, in machine.Inspection, output string) error {
	misses := image.Misses(in.Findings)
	out := cmd.OutOrStdout()
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"ref": ref, "digest": in.Digest, "platform": in.Platform, "wantPlatform": in.WantPlatform, "findings": in.Findings}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "image    %s\ndigest   %s\nplatform %s\n", ref, in.Digest, in.Platform)
		for _, f := range in.Findings {
			mark := "ok  "
			if !f.OK {
				mark = "MISS"
			}
			fmt.Fprintf(out, "%s  %-16s %s\n", mark, f.Item, f.Detail)
		}
	}
	if !in.PlatformOK() {
		fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: image check: %s is for %s, not %s\n", ref, in.Platform, in.WantPlatform)
		return &exitError{code: ExitFailure, err: errSilent}
	}
	if len(misses) > 0 {
		names := make([]string, len(misses))
		for i, m := range misses {
			names[i] = m.Item
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: image check: %s does not meet the worker image contract: missing %s\n", ref, strings.Join(names, ", "))
		return &exitError{code: ExitFailure, err: errSilent}
	}
	if output != "json" {
		fmt.Fprintf(out, "meets the worker image contract (%d items)\n", len(in.Findings))
	}
	return nil
}

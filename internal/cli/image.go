package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/image/deb"
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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return invalidf("image: name a subcommand: build or check (see 'aks-flex-node image --help')")
		},
	}
	cmd.AddCommand(newImageBuildCommand(), newImageCheckCommand())
	for _, c := range cmd.Commands() {
		c.Args = wrapArgs(c.Args)
	}
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

// mirrorGetter fetches from the mirror: https, plain HTTP only to
// loopback or, with --plain-http, to the mirror's own host.
func mirrorGetter(mirror string, plainHTTP bool) (deb.Getter, error) {
	u, err := url.Parse(mirror)
	if mirror != "" && (err != nil || u.Host == "") {
		return nil, fmt.Errorf("--mirror %q is not a URL", mirror)
	}
	allowed := ""
	if plainHTTP && u != nil {
		allowed = u.Host
	}
	client := &http.Client{Timeout: 30 * time.Minute}
	return func(ctx context.Context, raw string, max int64) (io.ReadCloser, error) {
		ru, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		if ru.Scheme != "https" && !(ru.Scheme == "http" && (isLoopbackHost(ru.Host) || ru.Host == allowed)) {
			return nil, fmt.Errorf("refusing plain HTTP to %s: only https is fetched, plain HTTP only from loopback; pass --plain-http to allow it for the mirror", ru.Host)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %s", raw, resp.Status)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, max+1), resp.Body}, nil
	}, nil
}

func isLoopbackHost(h string) bool {
	host := h
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		host = h[:i]
	}
	host = strings.Trim(host, "[]")
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

func newImageCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check REF",
		Short: "Check an image against the worker image contract",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return invalidf("image check: not implemented yet")
		},
	}
}

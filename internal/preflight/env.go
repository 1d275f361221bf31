package preflight

import (
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/ignition"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/network"
)

// Env is everything the checks look at. Each check reads files under Root
// and proc files under ProcDir, so unit tests run every check against a
// temp root with fake /proc files; the function fields stand in for what
// has no file (euid, statfs) and default to the real thing.
type Env struct {
	// Root is the host's "/" ("" means "/").
	Root string
	// ProcDir is a proc(5) tree describing the host at Root. Empty means
	// /proc when Root is "/" and none otherwise (checks that need it say
	// they did not probe).
	ProcDir string
	// Config is the loaded, validated config; ConfigFile is the file it
	// came from as this process opens it. Both are named in messages, and
	// existing-deployment hashes the file.
	Config     *config.Config
	ConfigFile string
	// Layout is Config's layout on Root.
	Layout layout.Layout
	// Prober runs the hostos probes; nil means one for Root and ProcDir.
	Prober *hostos.Prober
	// Geteuid defaults to os.Geteuid.
	Geteuid func() int
	// FreeBytes returns the bytes available to an unprivileged writer on
	// the filesystem holding path (a path this process opens); defaults
	// to statfs(2).
	FreeBytes func(path string) (uint64, error)
	// RunExecutable runs the probe executable host-layout writes; nil
	// means os/exec.
	RunExecutable func(ctx context.Context, path string) error
	// VerifyOfflineArtifacts, when set, runs after artifact-sources has
	// found an offline bundle complete: it is where the artifact package
	// plugs in full checksum verification of the bundle in dir (a path
	// this process opens). It returns how the bundle was found good:
	// "verified now" or "verified (unchanged since <time>)".
	VerifyOfflineArtifacts func(ctx context.Context, dir string) (string, error)
	// Provisioning says where provisioning-payload looks (its Root is
	// replaced by Root). nil reads the default customData path under Root
	// and does not ask IMDS: the CLI opts in, so no test reaches it.
	Provisioning *ignition.Sources
	// InspectOfflineArtifacts, when set, checks an oci:// source (expanded)
	// without downloading its files: the artifact exists, its manifest.json
	// matches the config, and every file's layer digest is its SHA-256.
	InspectOfflineArtifacts func(ctx context.Context, ref string) error
	// StagingNeed, when set, says how many bytes staging an oci:// source
	// (expanded) would still write under the bundles dir (0 when it is
	// staged), from its manifests alone: the staging-space check's probe.
	StagingNeed func(ctx context.Context, ref string) (uint64, error)
	// ChooseImage, when set, says which worker image start will use and
	// where it comes from (bootstrap.ociImage, the offline bundle, or
	// upstream's default); nil means bootstrap.ociImage as configured.
	ChooseImage func(ctx context.Context) (ref, source string, err error)
	// ResolveImage, when set, resolves the worker image to its manifest
	// digest under the transport policy and checks its platform and the
	// worker image contract, writing nothing: the worker-image check's
	// probe. A layout dir is opened under Root.
	ResolveImage func(ctx context.Context, ref string) (ResolvedImage, error)

	// ReadHostNet reads the host's IPv4 addresses and main-table routes
	// and the routes aks-flex-node owns; nil runs ip(8) on the running
	// host (Root "/") and probes nothing on an image tree.
	ReadHostNet func(ctx context.Context) (network.HostNet, []network.Route, error)

	// ServerVersion, when set, reads the API server's version: the
	// probe of node upgrade's version-skew check and of start's
	// node-version check when start repaves.
	ServerVersion func(ctx context.Context) (string, error)

	// Repaving, when set, says why this start repaves the joined node
	// (the config changed what its active machine runs): the node on
	// the host is not a stale install then, and existing-deployment
	// says so instead of suggesting a reset.
	Repaving string

	// FetchToken gets a token for an identity; nil asks its endpoint
	// (identity.Fetch). Tests substitute it.
	FetchToken func(ctx context.Context, s identity.Spec) (identity.Token, error)

	// The identity's token, fetched on first use (see identityToken).
	idOnce  sync.Once
	idSpec  identity.Spec
	idToken identity.Token
	idOK    bool
	idErr   error

	// The API server client, made on first use (see apiClient).
	apiOnce sync.Once
	api     *apiprobe.Client
	apiErr  error
}

func (e *Env) setDefaults() {
	if e.Root == "" {
		e.Root = "/"
	}
	e.Root = filepath.Clean(e.Root)
	if e.Prober == nil {
		e.Prober = &hostos.Prober{Root: e.Root, ProcDir: e.ProcDir}
	}
	if e.Layout.Root() == "" {
		e.Layout = e.Layout.WithRoot(e.Root)
	}
	if e.Geteuid == nil {
		e.Geteuid = os.Geteuid
	}
	if e.FreeBytes == nil {
		e.FreeBytes = statfsFree
	}
	if e.RunExecutable == nil {
		e.RunExecutable = func(ctx context.Context, path string) error {
			// The probe was just written; see fsutil.RunFresh.
			return fsutil.RunFresh(ctx, func() *exec.Cmd { return exec.CommandContext(ctx, path) })
		}
	}
}

// procDir mirrors hostos.Prober: the running host's /proc only describes
// the running host.
func (e *Env) procDir() string {
	if e.ProcDir != "" {
		return e.ProcDir
	}
	if e.Root == "/" {
		return "/proc"
	}
	return ""
}

// onRoot maps a host path to the path this process opens, resolved inside
// Root as a chroot would (fsroot): an absolute link in an image tree names
// the image's file, never the running host's.
func (e *Env) onRoot(p string) (string, error) { return fsroot.Resolve(e.Root, p) }

// stat, lstat and readFile are their os namesakes for a host path.
func (e *Env) stat(p string) (fs.FileInfo, error) {
	h, err := e.onRoot(p)
	if err != nil {
		return nil, err
	}
	return os.Stat(h)
}

func (e *Env) lstat(p string) (fs.FileInfo, error) {
	h, err := fsroot.ResolveNoFollow(e.Root, p)
	if err != nil {
		return nil, err
	}
	return os.Lstat(h)
}

func (e *Env) readFile(p string) ([]byte, error) {
	h, err := e.onRoot(p)
	if err != nil {
		return nil, err
	}
	// Regular files only: a named pipe where a file belongs (a bundle's
	// manifest.json) is an error, not a hang.
	f, err := fsutil.OpenRegular(h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// exists reports whether the host path p exists; a path that cannot be
// resolved does not.
func (e *Env) exists(p string) bool {
	_, err := e.stat(p)
	return err == nil
}

// configFile is the config file for messages.
func (e *Env) configFile() string {
	if e.ConfigFile != "" {
		return e.ConfigFile
	}
	return layout.ConfigFile
}

func statfsFree(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

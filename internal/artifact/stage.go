package artifact

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/internal/transport"
)

// Staging: where start gets the node components from. A local offline
// bundle is used where it is; a registry bundle, or the upstream release
// files, are staged under the layout's bundles dir. Whatever the source,
// the bundle is verified in full before anything else on the host
// changes, and hashed at most once per process: preflight's check, the
// stage and the install share one Stager. A bundle unchanged since it was
// last hashed (its verification record, record.go) is not hashed at all,
// and one whose installed files are unchanged too (the components stamp,
// stamp.go) is not installed again.

// StagedMarker in a staged registry bundle records the artifact digest it
// was pulled and verified from.
const StagedMarker = ".pulled-from"

// Stager stages and installs the node components one config asks for.
type Stager struct {
	Layout layout.Layout
	// Source is bootstrap.offlineArtifacts.source as configured (a
	// template); "" downloads the components from their upstream URLs.
	Source    string
	PlainHTTP bool
	Want      Components
	// Arch is the bundle's architecture; "" is this process's.
	Arch string
	// MachineRoot is the rootfs Install writes into (a path this process
	// opens); the components stamp covers what was installed there.
	MachineRoot string
	// Track records host paths before they are created, so reset removes
	// them even after a crash half-way; nil records nothing.
	Track func(hostPaths ...string) error
	Log   *slog.Logger

	// verified is the bundle this process last verified in full.
	verified *verifiedBundle
}

// Staged is a bundle ready to install: Dir is where this process opens it
// and HostDir the host path it is at, Pulled says whether staging
// downloaded anything, and WorkerImage is the oci-layout:// reference of
// the worker image the bundle carries ("" when it carries none).
type Staged struct {
	Dir         string
	HostDir     string
	Pulled      bool
	WorkerImage string
	// Layout is the bundle's layout: LayoutNative or LayoutUpstream.
	Layout string
}

// verifiedBundle is a bundle verified in full by this process: its stamp,
// taken before it was hashed, and the manifest that was checked.
type verifiedBundle struct {
	dir      string
	want     Components
	stamp    []FileStamp
	manifest *Manifest
	how      Verification
	// manifestSum and recorded: what its verification record needs,
	// and whether it was saved (record.go).
	manifestSum string
	recorded    bool
}

func (s *Stager) arch() string {
	if s.Arch != "" {
		return s.Arch
	}
	return runtime.GOARCH
}

func (s *Stager) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (s *Stager) track(paths ...string) error {
	if s.Track == nil {
		return nil
	}
	return s.Track(paths...)
}

// Stage resolves where the node components come from and makes them a
// verified bundle dir: a local source as it is, a registry or upstream
// source staged under the bundles dir. It is the gate: a bundle that does
// not verify is refused here, before the host changes, even when
// preflight's check of it was ignored.
func (s *Stager) Stage(ctx context.Context) (Staged, error) {
	st, err := s.stage(ctx)
	if err != nil {
		return Staged{}, err
	}
	if err := s.Verify(ctx, st.Dir); err != nil {
		return Staged{}, fmt.Errorf("bundle %s does not verify: %w", st.Dir, err)
	}
	m, err := LoadManifest(st.Dir)
	if err != nil {
		return Staged{}, err
	}
	st.WorkerImage = m.WorkerImageRef(st.HostDir)
	st.Layout = m.Layout
	return st, nil
}

func (s *Stager) stage(ctx context.Context) (Staged, error) {
	if s.Source != "" {
		dir, err := ResolveSource(s.Source, s.Want.Kubernetes)
		if err != nil {
			return Staged{}, fmt.Errorf("bootstrap.offlineArtifacts.source: %w", err)
		}
		if strings.HasPrefix(dir, OCIScheme) {
			return s.stageOCI(ctx, dir)
		}
		return Staged{Dir: s.Layout.OnRoot(dir), HostDir: dir}, nil
	}
	return s.stageUpstream(ctx)
}

// stageUpstream downloads the components from their upstream URLs into
// bundles/k8s-<version>, each file checked against its upstream checksum,
// and writes the manifest that makes the dir a bundle Verify and Install
// read.
func (s *Stager) stageUpstream(ctx context.Context) (Staged, error) {
	staged := s.Layout.BundlesDir() + "/k8s-" + s.Want.Kubernetes
	if err := s.track(s.Layout.BundlesDir(), staged); err != nil {
		return Staged{}, err
	}
	dir := s.Layout.OnRoot(staged)
	if err := Fetch(ctx, transport.Policy{}, UpstreamURLs(s.Want, s.arch()), dir); err != nil {
		return Staged{}, err
	}
	m, err := BuildManifest(ctx, dir, s.arch(), s.Want, nil)
	if err != nil {
		return Staged{}, fmt.Errorf("describe the downloaded components in %s: %w", staged, err)
	}
	if _, err := WriteManifest(dir, m); err != nil {
		return Staged{}, err
	}
	return Staged{Dir: dir, HostDir: staged}, nil
}

// stageOCI pulls the bundle at ref into bundles/oci-<digest>, verifies it
// and returns the dir. A bundle already staged from the same artifact
// digest is not downloaded again, but it is verified again (cheap when
// the components stamp shows it unchanged): one that no longer verifies
// (a file corrupted on disk) is removed and pulled afresh, here, before
// anything else on the host changes. A partial pull resumes per file. A
// freshly pulled bundle that does not verify is removed, so the next
// start pulls afresh.
func (s *Stager) stageOCI(ctx context.Context, ref string) (Staged, error) {
	reg := Registry{PlainHTTP: s.PlainHTTP}
	rem, ps := reg.Inspect(ctx, ref, s.Want, s.arch())
	if len(ps) > 0 {
		return Staged{}, Problems(ps)
	}
	staged := s.ociStaged(rem)
	if err := s.track(s.Layout.BundlesDir(), staged); err != nil {
		return Staged{}, err
	}
	dir := s.Layout.OnRoot(staged)
	marker := filepath.Join(dir, StagedMarker)
	if b, err := os.ReadFile(marker); err == nil && string(b) == rem.Digest.String()+"\n" {
		err := s.Verify(ctx, dir)
		if err == nil {
			return Staged{Dir: dir, HostDir: staged}, nil
		}
		if ctx.Err() != nil { // interrupted, not disproved: keep it
			return Staged{}, err
		}
		s.log().Warn("staged bundle no longer verifies; removing it and pulling again", "dir", staged, "ref", ref, "err", err)
		if err := os.RemoveAll(dir); err != nil {
			return Staged{}, fmt.Errorf("remove staged bundle %s that does not verify: %w", staged, err)
		}
	}
	// A pull killed half-way left temp files; the resumed pull renames
	// new ones into place and would keep those for good. Stage runs
	// under the node lock (start holds it): no other pull writes here.
	if err := removeTempFiles(dir); err != nil {
		return Staged{}, fmt.Errorf("staged bundle %s: %w", staged, err)
	}
	start := time.Now()
	n, err := reg.Pull(ctx, rem, dir)
	if err != nil {
		return Staged{}, err
	}
	if _, err := s.verify(ctx, dir, true); err != nil {
		_ = os.RemoveAll(dir)
		return Staged{}, fmt.Errorf("bundle pulled from %s into %s does not verify (removed): %w", ref, staged, err)
	}
	if _, err := fsutil.WriteFile(marker, []byte(rem.Digest.String()+"\n"), 0o644); err != nil {
		return Staged{}, err
	}
	s.log().Info("pulled bundle", "ref", ref, "digest", rem.Digest.String(), "dir", staged, "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
	return Staged{Dir: dir, HostDir: staged, Pulled: true}, nil
}

// ociStaged is where the registry bundle rem is staged (a layout path).
func (s *Stager) ociStaged(rem *Remote) string {
	return s.Layout.BundlesDir() + "/oci-" + rem.Digest.Hex[:16]
}

// pulled is whether rem's bundle is staged whole (its marker names rem's
// digest; Verify still checks its files before use).
func (s *Stager) pulled(rem *Remote) bool {
	b, err := os.ReadFile(filepath.Join(s.Layout.OnRoot(s.ociStaged(rem)), StagedMarker))
	return err == nil && string(b) == rem.Digest.String()+"\n"
}

// StagingNeed is how many bytes staging ref (an oci:// source, expanded)
// would still write under the bundles dir: its files and its manifest,
// less the files an earlier pull of the same artifact left whole; 0 when
// it is staged. Only the two manifests are fetched, so a plan can say a
// disk is too small before a byte of the bundle is pulled.
func (s *Stager) StagingNeed(ctx context.Context, ref string) (uint64, error) {
	rem, ps := Registry{PlainHTTP: s.PlainHTTP}.Inspect(ctx, ref, s.Want, s.arch())
	if len(ps) > 0 {
		return 0, Problems(ps)
	}
	if s.pulled(rem) {
		return 0, nil
	}
	dir := s.Layout.OnRoot(s.ociStaged(rem))
	need := uint64(len(rem.config))
	for title, l := range rem.layers {
		// A file a killed pull finished is kept by the resumed one.
		if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(title))); err == nil && fi.Mode().IsRegular() && fi.Size() == l.Size {
			continue
		}
		if l.Size > 0 {
			need += uint64(l.Size)
		}
	}
	return need, nil
}

// removeTempFiles removes the temp files writeStream and writeTemp make
// (".<name>.tmp-*") anywhere under dir; a missing dir has none.
func removeTempFiles(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if ok, _ := filepath.Match(".*.tmp-*", d.Name()); ok {
				return os.Remove(p)
			}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Verify is the full check of a bundle dir (a path this process opens)
// against Want: what preflight runs and what Stage requires before start
// touches the host. A bundle whose verification record matches
// (record.go), or that this process verified and that did not change
// since, is not hashed again.
func (s *Stager) Verify(ctx context.Context, dir string) error {
	_, err := s.verify(ctx, dir, true)
	return err
}

// Inspect checks an oci:// source (expanded) without downloading its
// files: the artifact exists, and its manifest agrees with Want and with
// its layers. The problems come back as one error, one per clause.
func (s *Stager) Inspect(ctx context.Context, ref string) error {
	_, ps := Registry{PlainHTTP: s.PlainHTTP}.Inspect(ctx, ref, s.Want, s.arch())
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i := range ps {
		msgs[i] = ps[i].Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// verify verifies dir in full and returns its manifest, unless this
// process already did, or its verification record says it was, and no
// file of it changed since (device, inode, size, mtime, ctime). With
// record, a bundle this process hashed gets its record saved (when there
// is a state dir); preflight passes false: it must write nothing on a
// host whose start it may refuse, so the stage and install tasks that
// run once it passed save the record it earned.
func (s *Stager) verify(ctx context.Context, dir string, record bool) (*Manifest, error) {
	key := bundleKey(dir)
	if v := s.verified; v != nil && v.dir == key && v.want == s.Want {
		if cur, err := stampBundle(dir); err == nil && slices.Equal(cur, v.stamp) {
			if record {
				s.recordVerified()
			}
			return v.manifest, nil
		}
	}
	s.verified = nil
	if m, rec, ok := s.fromRecord(key); ok {
		mp := filepath.Join(dir, ManifestName)
		if ps := append(versionProblems(m, mp, s.Want, s.arch()), layoutProblems(m, mp)...); len(ps) > 0 {
			return nil, Problems(ps)
		}
		s.verified = &verifiedBundle{dir: key, want: s.Want, stamp: rec.Files, manifest: m, how: Verification{Since: rec.VerifiedAt}}
		return m, nil
	}
	// Before hashing: a change during it breaks the stamp and the record.
	stamp, stampErr := stampBundle(dir)
	sum, _, sumErr := manifestDigest(dir)
	start := time.Now()
	m, ps := VerifyFor(ctx, dir, s.Want, s.arch())
	if len(ps) > 0 {
		s.dropRecord(key)
		return nil, Problems(ps)
	}
	s.log().Debug("verified bundle", "dir", dir, "files", len(m.Files)+len(m.Legal), "duration", time.Since(start).Round(time.Millisecond))
	if stampErr == nil && sumErr == nil {
		s.verified = &verifiedBundle{dir: key, want: s.Want, stamp: stamp, manifest: m, how: Verification{Since: start, Now: true}, manifestSum: sum}
		if record {
			s.recordVerified()
		}
	}
	return m, nil
}

// Install installs the staged bundle in dir into MachineRoot, then
// removes every other staged bundle. A bundle and installed files
// unchanged since they were last verified are left as they are; otherwise
// the bundle is verified (once per process), installed, and the new
// components stamp saved.
func (s *Stager) Install(ctx context.Context, dir string) (task.Result, error) {
	if s.Unchanged(dir) {
		return task.Result{Detail: "bundle and installed files unchanged since verified"}, s.RemoveStale(dir)
	}
	m, err := s.verify(ctx, dir, true)
	if err != nil {
		return task.Result{}, err
	}
	res, err := InstallVerified(ctx, dir, m, s.MachineRoot, s.log())
	if err != nil {
		return res, err
	}
	if err := s.saveStamp(dir); err != nil {
		return res, err
	}
	return res, s.RemoveStale(dir)
}

// RemoveStale removes every staged bundle but current (a path this
// process opens), so upgrades do not pile up old versions under the state
// dir.
func (s *Stager) RemoveStale(current string) error {
	root := s.Layout.OnRoot(s.Layout.BundlesDir())
	des, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, de := range des {
		d := filepath.Join(root, de.Name())
		if d == current {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove stale staged bundle %s: %w", d, err)
		}
		s.log().Info("removed stale staged bundle", "dir", filepath.Join(s.Layout.BundlesDir(), de.Name()))
	}
	return nil
}

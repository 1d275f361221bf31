package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Verification records: a bundle is hashed in full once, and then only
// again when something about it changed. After a full verification the
// stat of every file (device, inode, size, mtime, ctime; stampBundle) and
// the manifest's digest are recorded in the state dir, one record per
// bundle dir (a local bundle, or a registry bundle staged under the
// bundles dir). Preflight, stage, install and `artifacts verify --quick`
// read the same record. ctime cannot be set back from user space, so a
// file rewritten in place, even with its size and mtime restored, no
// longer matches and the bundle is hashed again in full. The record is
// not a secret (it holds stat data of files anyone can stat): 0644.

// RecordDir is where the verification records live, under the state dir.
const RecordDir = "verified"

type record struct {
	// Dir is the bundle dir, links resolved (bundleKey).
	Dir string `json:"dir"`
	// Manifest is the SHA-256 of manifest.json as it was verified.
	Manifest   string      `json:"manifestSHA256"`
	VerifiedAt time.Time   `json:"verifiedAt"`
	Files      []FileStamp `json:"files"`
}

// hashedBytes counts every byte this package hashed in this process
// (bundle verification, install comparisons, pulls, builds): what `start`
// reports, so a converged re-run can be seen to hash nothing. The worker
// image's layers are hashed elsewhere (package machine), only when a
// machine is provisioned.
var hashedBytes atomic.Int64

// BytesHashed is how many bytes this package has streamed through
// SHA-256 in this process so far.
func BytesHashed() int64 { return hashedBytes.Load() }

// Verification is how a bundle came to be trusted in this process.
type Verification struct {
	// Since is when it was last hashed in full. It is earlier than this
	// run when the record showed it unchanged since then.
	Since time.Time
	// Now is set when this run hashed it.
	Now bool
}

func (v Verification) String() string {
	if v.Now {
		return "verified now"
	}
	return "verified (unchanged since " + v.Since.UTC().Format(time.RFC3339) + ")"
}

// bundleKey is dir with its links resolved: what the record and this
// process's verification are kept under. Preflight opens a bundle by its
// resolved path and staging by the configured one; keyed by the path as
// given, a bundle reached through a link (/srv/bundles/current) would be
// hashed again by one of them on every run.
func bundleKey(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}

// recordPath is the record of bundle dir (a path this process opens),
// named by the dir's digest so that any path maps to one file name.
func (s *Stager) recordPath(dir string) (host, onRoot string) {
	sum := sha256.Sum256([]byte(dir))
	host = filepath.Join(s.Layout.StateDir(), RecordDir, hex.EncodeToString(sum[:8])+".json")
	return host, s.Layout.OnRoot(host)
}

// manifestDigest reads dir's manifest.json (a regular file, bounded) and
// returns its SHA-256 and its bytes. It is not counted as hashed bundle
// content: it is a few kilobytes read on every check.
func manifestDigest(dir string) (string, []byte, error) {
	f, err := fsutil.OpenRegular(filepath.Join(dir, ManifestName))
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return "", nil, err
	}
	if len(b) > maxManifest {
		return "", nil, fmt.Errorf("%s is larger than %d bytes", ManifestName, maxManifest)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b, nil
}

// fromRecord returns the manifest of dir and its record when the record
// matches: the same manifest digest, and every file with the stat it had
// when it was hashed. Anything else (no record, an unreadable one, one
// change) returns ok=false and the caller hashes. The versions and arch
// asked for are compared with the manifest by the caller, not recorded:
// `artifacts verify --quick` without a config asks for fewer than start,
// and must not void start's record.
func (s *Stager) fromRecord(dir string) (m *Manifest, r record, ok bool) {
	_, p := s.recordPath(dir)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, r, false
	}
	if json.Unmarshal(data, &r) != nil || r.Dir != dir || len(r.Files) == 0 {
		return nil, r, false
	}
	cur, err := stampBundle(dir)
	if err != nil || !slices.Equal(cur, r.Files) {
		return nil, r, false
	}
	sum, b, err := manifestDigest(dir)
	if err != nil || sum != r.Manifest {
		return nil, r, false
	}
	m, err = parseManifestIn(dir, filepath.Join(dir, ManifestName), b)
	if err != nil {
		return nil, r, false
	}
	return m, r, true
}

// dropRecord removes dir's record once dir failed to verify.
func (s *Stager) dropRecord(dir string) {
	_, p := s.recordPath(dir)
	_ = os.Remove(p)
}

// recordVerified saves the record of the bundle this process hashed, once
// there is a state dir to save it in: a first start's preflight can run
// before there is one.
func (s *Stager) recordVerified() {
	v := s.verified
	if v == nil || !v.how.Now || v.recorded {
		return
	}
	saved, err := s.saveRecord(v.dir, v.manifestSum, v.stamp, v.how.Since)
	if err != nil {
		s.log().Warn("bundle verified, but its record was not saved: the next run hashes it again", "dir", v.dir, "err", err)
	}
	v.recorded = saved
}

// saveRecord replaces dir's record atomically. stamp was taken before
// hashing began and manifestSum read before it too, so a change during
// the hash leaves a record that no longer matches. Without a state dir
// (`artifacts verify --quick` on a host start never ran on) nothing is
// recorded.
func (s *Stager) saveRecord(dir, manifestSum string, stamp []FileStamp, at time.Time) (saved bool, err error) {
	host, p := s.recordPath(dir)
	if _, err := os.Stat(s.Layout.OnRoot(s.Layout.StateDir())); err != nil {
		return false, nil
	}
	if err := s.track(filepath.Dir(host), host); err != nil {
		return false, err
	}
	data, err := json.Marshal(record{Dir: dir, Manifest: manifestSum, VerifiedAt: at.UTC(), Files: stamp})
	if err != nil {
		return false, err
	}
	if _, err := fsutil.WriteFile(p, data, 0o644); err != nil {
		return false, fmt.Errorf("save verification record %s: %w", host, err)
	}
	return true, nil
}

// VerifyQuick is Verify through the record: a bundle whose record
// matches is not hashed; any other is verified in full and its record
// replaced. It says which of the two happened.
func (s *Stager) VerifyQuick(ctx context.Context, dir string) (Verification, error) {
	return s.verifyQuick(ctx, dir, true)
}

// CheckQuick is VerifyQuick for preflight: it reads the record but never
// writes one (see verify); start's stage and install tasks save it.
func (s *Stager) CheckQuick(ctx context.Context, dir string) (Verification, error) {
	return s.verifyQuick(ctx, dir, false)
}

func (s *Stager) verifyQuick(ctx context.Context, dir string, record bool) (Verification, error) {
	if _, err := s.verify(ctx, dir, record); err != nil {
		return Verification{}, err
	}
	if s.verified == nil { // verified, but its files could not be stat'ed
		return Verification{Since: time.Now(), Now: true}, nil
	}
	return s.verified.how, nil
}

// StagedDir is where a registry bundle at ref (expanded) is staged on
// this host when it is: the artifact is inspected in the registry (its
// manifest only) and its staged copy must carry the same digest. ok is
// false when it is not staged here.
func (s *Stager) StagedDir(ctx context.Context, ref string) (dir string, ok bool, err error) {
	rem, ps := Registry{PlainHTTP: s.PlainHTTP}.Inspect(ctx, ref, s.Want, s.arch())
	if len(ps) > 0 {
		return "", false, Problems(ps)
	}
	dir = s.Layout.OnRoot(s.Layout.BundlesDir() + "/oci-" + rem.Digest.Hex[:16])
	b, err := os.ReadFile(filepath.Join(dir, StagedMarker))
	if err != nil || string(b) != rem.Digest.String()+"\n" {
		return dir, false, nil
	}
	return dir, true, nil
}

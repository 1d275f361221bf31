package join

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// What a crash may leave half-written: every host tree the agent writes,
// the machines dir (its entries; a temp rootfs shows there), and inside
// the machine what start installs and writes (not what the machine's own
// systemd, containerd and kubelet write while it runs).
var (
	crashWatched = []string{
		"/etc/aks-flex-node", "/etc/systemd/system", "/etc/systemd/nspawn", "/etc/sysctl.d", "/etc/modules-load.d",
		"/opt/aks-flex-node", "/var/lib/aks-flex-node", "/var/log/aks-flex-node",
	}
	crashMachineWatched = []string{
		"/usr/local", "/opt/cni", "/var/lib/aks-flex-node", "/etc/containerd", "/etc/cni", "/etc/systemd/system",
		"/etc/kubernetes/bootstrap-kubelet.conf", "/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/config.yaml",
	}
)

const machinesDir = "/var/lib/machines"

// fileState is one entry of a watched tree: a directory, a symlink and its
// target, or a regular file, its mode and its SHA-256.
type fileState struct {
	Kind string // "d", "l", "f" or "o" (other)
	Mode fs.FileMode
	Link string
	Sum  string
}

func (s fileState) String() string {
	switch s.Kind {
	case "l":
		return "-> " + s.Link
	case "f":
		return fmt.Sprintf("%v sha256 %.12s", s.Mode, s.Sum)
	}
	return s.Kind
}

type crashTree map[string]fileState

// snapshotter records watched trees and hashes a file only when its
// identity (device, inode, size, mtime, ctime) changed since it last
// hashed it: a chain of forty crashes would otherwise hash the bundle and
// the node's binaries forty times.
type snapshotter struct {
	cache map[string]cachedSum
}

type cachedSum struct {
	key string
	sum string
}

func newSnapshotter() *snapshotter { return &snapshotter{cache: map[string]cachedSum{}} }

// take records the watched trees below root (the host's "/" as this
// process sees it).
func (s *snapshotter) take(root string) (crashTree, error) {
	t := crashTree{}
	for _, p := range crashWatched {
		if err := s.walk(root, p, t); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, machinesDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		m := machinesDir + "/" + e.Name()
		t[m] = fileState{Kind: kindOf(e.Type())}
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		for _, p := range crashMachineWatched {
			if err := s.walk(root, m+p, t); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "d"
	case m&fs.ModeSymlink != 0:
		return "l"
	case m.IsRegular():
		return "f"
	}
	return "o"
}

func (s *snapshotter) walk(root, start string, t crashTree) error {
	err := filepath.WalkDir(filepath.Join(root, start), func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, fp)
		p := path.Clean("/" + filepath.ToSlash(rel))
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		st := fileState{Kind: kindOf(info.Mode()), Mode: info.Mode()}
		switch st.Kind {
		case "l":
			st.Link, err = os.Readlink(fp)
		case "f":
			st.Sum, err = s.sum(fp, info)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		t[p] = st
		return err
	})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", start, err)
	}
	return nil
}

func (s *snapshotter) sum(fp string, info fs.FileInfo) (string, error) {
	key := ""
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		key = fmt.Sprintf("%d:%d:%d:%d:%d", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
		if c, ok := s.cache[fp]; ok && c.key == key {
			return c.sum, nil
		}
	}
	f, err := os.Open(fp)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if key != "" {
		s.cache[fp] = cachedSum{key: key, sum: sum}
	}
	return sum, nil
}

// crashSnap is the watched trees right after one crash (or before or
// after a chain), with the tracker's content.
type crashSnap struct {
	step    string
	tree    crashTree
	tracker []byte
}

// trackerFile grows while start runs: every state of it is a list of
// paths, each of which the converged tracker also has.
const (
	trackerFile  = "/var/lib/aks-flex-node/created.json"
	nodeLockFile = "/var/lib/aks-flex-node/node.lock"
)

// checkOldOrNew: right after each crash every file start or reset writes
// is either as it was before the chain (old) or as it is once a re-run
// converged (new), never something else (truncated, half-renamed, mixed);
// the state file with it. What is in neither (a temp file, a temp rootfs,
// a stale lock) is allowed right after a crash, and must be gone once the
// re-run converged; it is listed in the log. The converged tree has no
// dot-named leftovers the chain made.
func checkOldOrNew(t *testing.T, kind string, beforeSnap, finalSnap crashSnap, snaps []crashSnap) {
	t.Helper()
	before, final := beforeSnap.tree, finalSnap.tree
	for _, s := range snaps {
		var transients []string
		for _, p := range sortedPaths(s.tree) {
			st := s.tree[p]
			if st.Kind == "d" {
				continue
			}
			old, inOld := before[p]
			neu, inNew := final[p]
			switch {
			case inNew && st == neu, inOld && st == old:
			case p == trackerFile && inNew:
				trackerSubset(t, kind, s.step, s.tracker, finalSnap.tracker)
			case p == nodeLockFile:
				// A killed holder leaves the lock file; the next
				// holder takes it over and removes it as it releases.
			case !inNew && !inOld:
				transients = append(transients, p)
			default:
				t.Errorf("%s at %s: %s is neither old (%v) nor new (%v): %v", kind, s.step, p, old, neu, st)
			}
		}
		if len(transients) > 0 {
			t.Logf("%s at %s left, until the re-run: %s", kind, s.step, strings.Join(transients, ", "))
		}
	}
	for p, st := range final {
		if _, ok := before[p]; !ok && strings.HasPrefix(path.Base(p), ".") && !dotRecord(p) {
			t.Errorf("%s: after the re-run converged, %s (%v) is left", kind, p, st)
		}
	}
}

// dotRecord names the dot-named files that are not temp files: the
// staged bundle's record of where it came from, and systemd's lock on a
// running machine's image. Every other dot-named file a chain leaves is a
// writer's temp file (renameio's .<name><digits>, .<name>.tmp-*,
// .candidate-*, a temp rootfs .<machine>.tmp-*).
func dotRecord(p string) bool {
	base := path.Base(p)
	return base == ".pulled-from" && strings.HasPrefix(p, "/var/lib/aks-flex-node/bundles/") ||
		strings.HasPrefix(base, ".#") && strings.HasSuffix(base, ".lck") && path.Dir(p) == machinesDir
}

func sortedPaths(t crashTree) []string {
	out := make([]string, 0, len(t))
	for p := range t {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// trackerSubset: every tracker a crash left is a JSON list of paths that
// the converged tracker also lists (records are added, never rewritten).
func trackerSubset(t *testing.T, kind, step string, crashed, final []byte) {
	t.Helper()
	var got, want []string
	if err := json.Unmarshal(crashed, &got); err != nil {
		t.Errorf("%s at %s: %s is not a JSON list: %v", kind, step, trackerFile, err)
		return
	}
	if err := json.Unmarshal(final, &want); err != nil {
		t.Errorf("%s: converged %s: %v", kind, trackerFile, err)
		return
	}
	have := map[string]bool{}
	for _, p := range want {
		have[p] = true
	}
	for _, p := range got {
		if !have[p] {
			t.Errorf("%s at %s: %s lists %s, which the converged tracker does not", kind, step, trackerFile, p)
		}
	}
}

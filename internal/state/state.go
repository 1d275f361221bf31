// Package state owns what aks-flex-node records on the host about what it
// applied: the applied-state file written when a join converges, and the
// install tracker that lists every path `start` created so `reset` removes
// exactly those, even after a half-finished start.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// File names inside the layout's state dir.
const (
	AppliedFile = "state.json"
	TrackerFile = "created.json"
)

// Applied is the state of a converged join.
type Applied struct {
	SchemaVersion int    `json:"schemaVersion"`
	ConfigFile    string `json:"configFile"`
	ConfigSHA256  string `json:"configSHA256"`
	Prefix        string `json:"prefix"`
	NodeName      string `json:"nodeName"`
	Machine       string `json:"machine"`
	// Image is bootstrap.ociImage as configured; ImageDigest the manifest
	// digest it resolved to and the machine's rootfs was unpacked from.
	Image             string    `json:"image,omitempty"`
	ImageDigest       string    `json:"imageDigest,omitempty"`
	KubernetesVersion string    `json:"kubernetesVersion"`
	ContainerdVersion string    `json:"containerdVersion,omitempty"`
	RuncVersion       string    `json:"runcVersion,omitempty"`
	AgentVersion      string    `json:"agentVersion"`
	AppliedAt         time.Time `json:"appliedAt"`
	// NodeFiles are the checksums (node.Checksum) of the files start
	// rendered into the machine, by path inside it: what the agent's
	// drift repair compares the machine against and restores. Nothing
	// else in the machine is the agent's to repair.
	NodeFiles map[string]string `json:"nodeFiles,omitempty"`
}

// ErrChecksum means the state file does not match its sidecar: it was
// edited or torn, and is never trusted silently.
var ErrChecksum = errors.New("state file does not match its .sha256 sidecar")

// saveApplied writes the state and its SHA-256 sidecar, both 0600,
// atomically. The sidecar is written last: a crash in between leaves a
// mismatch that loadApplied reports rather than a state that looks valid.
func saveApplied(dir string, a Applied) (bool, error) {
	a.SchemaVersion = 1
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return false, err
	}
	data = append(data, '\n')
	path := filepath.Join(dir, AppliedFile)
	// A converged re-run must not rewrite the file just because the time
	// moved: keep the old timestamp when nothing else changed.
	if old, err := loadApplied(dir); err == nil && old != nil {
		b := a
		b.AppliedAt = old.AppliedAt
		if same, _ := json.Marshal(b); string(same) == mustJSON(*old) {
			return false, nil
		}
	}
	changed, err := fsutil.WriteFile(path, data, 0o600)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	c2, err := fsutil.WriteFile(path+".sha256", []byte(hex.EncodeToString(sum[:])+"  "+AppliedFile+"\n"), 0o600)
	return changed || c2, err
}

func mustJSON(a Applied) string {
	b, _ := json.Marshal(a)
	return string(b)
}

// loadApplied reads the state; (nil, nil) when there is none.
func loadApplied(dir string) (*Applied, error) {
	path := filepath.Join(dir, AppliedFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	side, err := os.ReadFile(path + ".sha256")
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrChecksum, err)
	}
	sum := sha256.Sum256(data)
	if want, _, _ := strings.Cut(strings.TrimSpace(string(side)), " "); want != hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%s: %w (run aks-flex-node reset to start over)", path, ErrChecksum)
	}
	var a Applied
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &a, nil
}

// ConfigDigest is the SHA-256 of a config file's bytes, as recorded.
func ConfigDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// RecordedConfigDigest returns the config digest the applied-state file's
// bytes record ("" when none), reading nothing else and checking no
// sidecar: preflight must tell which config made an earlier install even
// when the rest of the file is damaged or from another version.
func RecordedConfigDigest(data []byte) (string, error) {
	var a struct {
		ConfigSHA256 string `json:"configSHA256"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return "", err
	}
	return a.ConfigSHA256, nil
}

// Tracker records every path start created, before creating it, so a
// crash leaves an over-approximation reset can clean up, never an orphan.
type Tracker struct {
	path  string
	paths map[string]bool
}

// openTracker loads the tracker in dir (empty when absent).
func openTracker(dir string) (*Tracker, error) {
	t := &Tracker{path: filepath.Join(dir, TrackerFile), paths: map[string]bool{}}
	var list []string
	if _, err := fsutil.ReadJSON(t.path, &list); err != nil {
		return nil, err
	}
	for _, p := range list {
		t.paths[p] = true
	}
	return t, nil
}

// Add records host paths (persisting only when something is new).
func (t *Tracker) Add(paths ...string) error {
	added := false
	for _, p := range paths {
		if !t.paths[p] {
			t.paths[p] = true
			added = true
		}
	}
	if !added {
		return nil
	}
	_, err := fsutil.WriteJSON(t.path, t.List())
	return err
}

// List returns the recorded paths, deepest first, the order to remove in.
func (t *Tracker) List() []string {
	out := make([]string, 0, len(t.paths))
	for p := range t.paths {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if di, dj := strings.Count(out[i], "/"), strings.Count(out[j], "/"); di != dj {
			return di > dj
		}
		return out[i] < out[j]
	})
	return out
}

// Path is where the tracker lives.
func (t *Tracker) Path() string { return t.path }

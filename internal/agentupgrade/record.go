package agentupgrade

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// File names inside the layout's state dir. The records are key=value lines
// rather than JSON because the recovery script reads and writes them with
// nothing but bash and coreutils: a host with a read-only /usr and no
// package manager has no jq, and the recovery path must not depend on the
// agent binary whose failure it is repairing.
const (
	InFlightFile = "upgrade-in-flight"
	ResultFile   = "upgrade-result"
	FailedFile   = "upgrade-agent-failed"
	// LockFile was agent-upgrade's own lock before the node lock
	// (internal/nodelock) took its place; uninstall-service still removes
	// the file an older agent left.
	LockFile = "upgrade.lock"
	// LinksLockFile serializes every change of the links and the records
	// between agent-upgrade, the confirming agent, the recovery script
	// (flock(1)) and seeding: a confirmation and a rollback at the
	// deadline must not interleave. The node lock is different:
	// agent-upgrade holds it for its whole run, while it waits for
	// recovery.
	LinksLockFile = "upgrade-links.lock"
)

// InFlight is the record of an upgrade between the switch of `current` and
// the new agent's confirmation (or the rollback).
type InFlight struct {
	FromSlot    string    `json:"fromSlot"`
	FromVersion string    `json:"fromVersion"`
	ToSlot      string    `json:"toSlot"`
	ToVersion   string    `json:"toVersion"`
	Deadline    time.Time `json:"deadline"`
	Started     time.Time `json:"started"`
	// SwitchMono (CLOCK_MONOTONIC, microseconds, like systemd's
	// ExecMainStartTimestampMonotonic) and BootID are taken just before
	// current is switched: an agent process systemd started earlier in
	// the same boot is the old agent, whose failure (a stop that times
	// out during the upgrade's restart) must not roll the new one back.
	SwitchMono int64  `json:"-"`
	BootID     string `json:"-"`
}

// Result is the record of the last upgrade's outcome, written by the
// confirming agent or by the recovery script.
type Result struct {
	Result      string `json:"result"` // upgraded, rolled-back, aborted
	Reason      string `json:"reason"`
	FromSlot    string `json:"fromSlot"`
	FromVersion string `json:"fromVersion"`
	ToSlot      string `json:"toSlot"`
	ToVersion   string `json:"toVersion"`
	Time        string `json:"time"`
	By          string `json:"by"` // agent or recovery
}

// Results the records use.
const (
	ResultUpgraded   = "upgraded"
	ResultRolledBack = "rolled-back"
	ResultAborted    = "aborted"
)

func statePath(l layout.Layout, name string) string { return l.OnRoot(l.StateDir() + "/" + name) }

// safeValue keeps record values to one line of printable bytes; versions are
// checked more strictly where they are read from a candidate.
func safeValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func writeKV(path string, kv [][2]string) error {
	var b bytes.Buffer
	for _, e := range kv {
		fmt.Fprintf(&b, "%s=%s\n", e[0], safeValue(e[1]))
	}
	if _, err := fsutil.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	// The rename must be durable before anything acts on the record: the
	// in-flight record is written before current is switched, and the
	// lib dir holding current may be another filesystem, so a power cut
	// could otherwise keep the switch and lose the record.
	return fsutil.SyncDir(filepath.Dir(path))
}

func readKV(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			m[k] = v
		}
	}
	return m, sc.Err()
}

// LoadInFlight returns the upgrade in flight, or nil when there is none.
func LoadInFlight(l layout.Layout) (*InFlight, error) {
	p := statePath(l, InFlightFile)
	m, err := readKV(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", l.StateDir()+"/"+InFlightFile, err)
	}
	r := &InFlight{FromSlot: m["from_slot"], FromVersion: m["from_version"], ToSlot: m["to_slot"], ToVersion: m["to_version"]}
	if d, err := strconv.ParseInt(m["deadline"], 10, 64); err == nil {
		r.Deadline = time.Unix(d, 0)
	}
	r.Started, _ = time.Parse(time.RFC3339, m["started"])
	r.SwitchMono, _ = strconv.ParseInt(m["switch_mono"], 10, 64)
	r.BootID = m["boot_id"]
	return r, nil
}

func saveInFlight(l layout.Layout, r InFlight) error {
	return writeKV(statePath(l, InFlightFile), [][2]string{
		{"from_slot", r.FromSlot}, {"from_version", r.FromVersion},
		{"to_slot", r.ToSlot}, {"to_version", r.ToVersion},
		// Rounded up: the script compares whole seconds and must never
		// act before the deadline.
		{"deadline", strconv.FormatInt(r.Deadline.Add(time.Second-1).Unix(), 10)},
		{"started", r.Started.UTC().Format(time.RFC3339)},
		{"switch_mono", strconv.FormatInt(r.SwitchMono, 10)},
		{"boot_id", r.BootID},
	})
}

// bootIDFile names this boot; CLOCK_MONOTONIC restarts at every boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// switchClock returns the monotonic time in microseconds and the boot ID.
func switchClock() (int64, string) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, ""
	}
	id, _ := os.ReadFile(bootIDFile)
	return ts.Nano() / 1000, strings.TrimSpace(string(id))
}

// LoadResult returns the last upgrade or recovery record, or nil.
func LoadResult(l layout.Layout) (*Result, error) {
	m, err := readKV(statePath(l, ResultFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", l.StateDir()+"/"+ResultFile, err)
	}
	return &Result{Result: m["result"], Reason: m["reason"], FromSlot: m["from_slot"], FromVersion: m["from_version"],
		ToSlot: m["to_slot"], ToVersion: m["to_version"], Time: m["time"], By: m["by"]}, nil
}

func saveResult(l layout.Layout, r Result) error {
	return writeKV(statePath(l, ResultFile), [][2]string{
		{"result", r.Result}, {"reason", r.Reason},
		{"from_slot", r.FromSlot}, {"from_version", r.FromVersion},
		{"to_slot", r.ToSlot}, {"to_version", r.ToVersion},
		{"time", r.Time}, {"by", r.By},
	})
}

// clearInFlight removes the in-flight record and the failure marker; the
// marker goes first so a crash in between never leaves a marker that a
// later upgrade would mistake for its own agent's failure.
func clearInFlight(l layout.Layout) error {
	for _, name := range []string{FailedFile, InFlightFile} {
		if _, err := fsutil.RemoveIfExists(statePath(l, name)); err != nil {
			return fmt.Errorf("remove %s: %w", l.StateDir()+"/"+name, err)
		}
	}
	return fsutil.SyncDir(l.OnRoot(l.StateDir()))
}

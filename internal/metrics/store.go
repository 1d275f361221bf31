package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/task"
)

// File is the store in the layout's state dir; LockFile serialises its
// updates between processes (start, agent-upgrade and the agent may all
// count at once).
const (
	File     = "metrics.json"
	LockFile = "metrics.json.lock"
)

// maxStoreFile bounds what is read of the store.
const maxStoreFile = 1 << 20

// Store is the part of the metrics that outlives a process: the durations
// of joins, repaves and upgrades, which commands measure and the agent
// serves, and the errors of tasks, whoever ran them. Prometheus counters
// and histograms must only grow, so it keeps cumulative bucket counts,
// not samples.
//
// A store never creates the state dir: a host that has none (not yet
// joined, or reset) records nothing, and reset, which removes the dir,
// leaves no store behind.
type Store struct {
	dir string // the state dir, as this process opens it
}

// OpenStore is the store of layout l.
func OpenStore(l layout.Layout) *Store { return &Store{dir: l.OnRoot(l.StateDir())} }

type storeData struct {
	Histograms []histogramData    `json:"histograms"`
	TaskErrors map[string]float64 `json:"taskErrors,omitempty"`
}

type histogramData struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Bounds []float64         `json:"bounds"`
	// Counts[i] is the number of observations <= Bounds[i] (cumulative,
	// as Prometheus exposes them).
	Counts []uint64 `json:"counts"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
}

func (h *histogramData) key() string { return h.Name + labelKey(h.Labels) }

func labelKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, ",%s=%s", k, labels[k])
	}
	return b.String()
}

// Observe adds one duration of operation op (OpJoin, OpRepave,
// OpUpgrade) with labels to its histogram.
func (s *Store) Observe(op string, labels map[string]string, d time.Duration) error {
	bounds, ok := operationBuckets[op]
	if !ok {
		return fmt.Errorf("metrics: unknown operation %q", op)
	}
	return s.update(func(sd *storeData) {
		want := histogramData{Name: op, Labels: labels}
		i := slices.IndexFunc(sd.Histograms, func(h histogramData) bool { return h.key() == want.key() })
		if i < 0 || !slices.Equal(sd.Histograms[i].Bounds, bounds) {
			// New, or the bounds of another version: start this one over
			// (a scraper sees a counter reset).
			want.Bounds, want.Counts = bounds, make([]uint64, len(bounds))
			if i < 0 {
				sd.Histograms = append(sd.Histograms, want)
				i = len(sd.Histograms) - 1
			} else {
				sd.Histograms[i] = want
			}
		}
		h := &sd.Histograms[i]
		v := d.Seconds()
		for j, b := range h.Bounds {
			if v <= b {
				h.Counts[j]++
			}
		}
		h.Count++
		h.Sum += v
	})
}

// TaskFailed counts one failure of the task (or agent loop) named task.
func (s *Store) TaskFailed(name string) error {
	return s.update(func(sd *storeData) {
		if sd.TaskErrors == nil {
			sd.TaskErrors = map[string]float64{}
		}
		sd.TaskErrors[name]++
	})
}

// TaskErrors is a task.Observer that counts every failed task in the
// store: add it to a Runner so that start, reset and agent-upgrade count
// their failures where the agent serves them. Recording is best effort:
// a store that cannot be written never fails the command.
func TaskErrors(s *Store) task.Observer { return taskErrors{s} }

type taskErrors struct{ s *Store }

func (taskErrors) PhaseStarted(string) {}
func (taskErrors) TaskStarted(string)  {}
func (t taskErrors) TaskDone(name string, _ task.Result, err error, _ time.Duration) {
	if err != nil {
		_ = t.s.TaskFailed(name)
	}
}

// load reads the store; an absent one is empty.
func (s *Store) load() (*storeData, error) {
	var sd storeData
	data, err := fsutil.ReadRegular(filepath.Join(s.dir, File), maxStoreFile)
	if errors.Is(err, fs.ErrNotExist) {
		return &sd, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &sd); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(s.dir, File), err)
	}
	return &sd, nil
}

// update changes the store under its lock. Without a state dir it does
// nothing; a store that does not parse is started over rather than
// blocking every later count.
func (s *Store) update(change func(*storeData)) error {
	if _, err := os.Stat(s.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lock, err := os.OpenFile(filepath.Join(s.dir, LockFile), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("metrics store: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("metrics store: lock %s: %w", lock.Name(), err)
	}
	sd, err := s.load()
	if err != nil {
		sd = &storeData{}
	}
	change(sd)
	_, err = fsutil.WriteJSON(filepath.Join(s.dir, File), sd)
	return err
}

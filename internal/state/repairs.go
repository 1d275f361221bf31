package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// RepairsFile, in the state dir, holds the agent's last repairs, which
// `status` shows. Reset removes it with the rest of the state dir.
const RepairsFile = "repairs.json"

// keptRepairs is how many repairs the file keeps, newest last.
const keptRepairs = 20

// Repair is one thing the agent put back.
type Repair struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	What string    `json:"what"`
}

// RecordRepair appends r to the repairs in dir, keeping the last
// keptRepairs, atomically (0600). Only the agent writes it, under the
// node lock.
func RecordRepair(dir string, r Repair) error {
	list, err := LastRepairs(dir)
	if err != nil {
		list = nil // a damaged file is replaced, not a reason to stop repairing
	}
	list = append(list, r)
	if len(list) > keptRepairs {
		list = list[len(list)-keptRepairs:]
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	_, err = fsutil.WriteFile(filepath.Join(dir, RepairsFile), append(data, '\n'), 0o600)
	return err
}

// LastRepairs reads the recorded repairs, oldest first; none when there
// is no file.
func LastRepairs(dir string) ([]Repair, error) {
	data, err := os.ReadFile(filepath.Join(dir, RepairsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []Repair
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, RepairsFile), err)
	}
	return list, nil
}

package state

import (
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

// recordRepair appends r to the repairs in dir, keeping the last
// keptRepairs, atomically (0600). Only the agent writes it, under the
// node lock.
func recordRepair(dir string, r Repair) error {
	list, err := lastRepairs(dir)
	if err != nil {
		list = nil // a damaged file is replaced, not a reason to stop repairing
	}
	list = append(list, r)
	if len(list) > keptRepairs {
		list = list[len(list)-keptRepairs:]
	}
	_, err = fsutil.WriteJSON(filepath.Join(dir, RepairsFile), list)
	return err
}

// lastRepairs reads the recorded repairs, oldest first; none when there
// is no file.
func lastRepairs(dir string) ([]Repair, error) {
	var list []Repair
	if _, err := fsutil.ReadJSON(filepath.Join(dir, RepairsFile), &list); err != nil {
		return nil, err
	}
	return list, nil
}

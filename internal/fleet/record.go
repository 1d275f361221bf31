package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Record is what a node keeps of the rollout that selects it, in the
// state dir (layout.RolloutRecord): the release it runs because a rollout
// moved it there (Applied), and where it is in the rollout now (Phase,
// Step, the slot it holds), so a restarted agent resumes rather than
// starts over, and start keeps the release instead of repaving back to
// the file's older values.
type Record struct {
	// Rollout, UID and Generation name the rollout and the spec
	// generation the node acts on.
	Rollout    string    `json:"rollout"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	Phase      Phase     `json:"phase"`
	Step       string    `json:"step,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	Since      time.Time `json:"since"`
	// Slot is the Lease name of the slot the node holds; empty when none.
	Slot string `json:"slot,omitempty"`
	// CordonedBefore is true when the Node was unschedulable before the
	// rollout cordoned it: the rollout never uncordons it.
	CordonedBefore bool `json:"cordonedBefore,omitempty"`
	// ResumedAt is the rollout's flexnode.azure.com/resumed-at the node
	// last acted on: a Failed node retries when the rollout carries
	// another (fleet resume), and only then.
	ResumedAt string `json:"resumedAt,omitempty"`
	// Unreported: the Node's condition may not show Phase yet (the API
	// server was not reached); SlotAction: what the slot still needs
	// ("release" or "fail"). The agent tells the API server once it is
	// back (issue 30 item 8, agent_pending.go).
	Unreported bool   `json:"unreported,omitempty"`
	SlotAction string `json:"slotAction,omitempty"`
	// Applied is the release the node runs from a rollout; nil until one
	// moved it. It outlives the rollout: deleting a rollout does not move
	// the node back.
	Applied *AppliedRelease `json:"applied,omitempty"`
	// Previous is the release of the retained side: the one Applied
	// replaced when the node last switched (nil: the config file's
	// values). A switch back (fleet rollback) makes it Applied again (and
	// the release it left Previous), so start converges to what the node
	// runs (agent_commit.go).
	Previous *AppliedRelease `json:"previous,omitempty"`
	// UnsentEvents are phase-change Events the API server did not take
	// (it was away): sent once each when it is back, at most
	// maxUnsentEvents kept (agent_events.go).
	UnsentEvents []UnsentEvent `json:"unsentEvents,omitempty"`
}

// AppliedRelease is a release a rollout moved the node to.
type AppliedRelease struct {
	Rollout    string           `json:"rollout"`
	Generation int64            `json:"generation"`
	Release    v1alpha1.Release `json:"release"`
	At         time.Time        `json:"at"`
}

// LoadRecord reads the record at path; an error wrapping fs.ErrNotExist
// when the node has never been selected by a rollout.
func LoadRecord(path string) (Record, error) {
	var r Record
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// SaveRecord writes r at path, atomically, mode 0600.
func SaveRecord(path string, r Record) error {
	_, err := fsutil.WriteJSON(path, r)
	return err
}

// Source names where a config value came from, for start's and status's
// "from" column.
type Source struct {
	Key  string // the config key's JSON path, e.g. components.kubernetes
	From string // "rollout <name> generation <n>"
}

// Overlay is c with the fields the applied release sets replaced, and
// which keys it replaced. A release field that is empty leaves the file's
// value. c itself is not changed.
func (a *AppliedRelease) Overlay(c *config.Config) (*config.Config, []Source) {
	if a == nil {
		return c, nil
	}
	cc := *c
	from := fmt.Sprintf("rollout %s generation %d", a.Rollout, a.Generation)
	var src []Source
	if v := a.Release.KubernetesVersion; v != "" {
		// The release names it as Kubernetes does (v1.35.4); the config
		// as upstream's does (1.35.4).
		cc.Components.Kubernetes = strings.TrimPrefix(v, "v")
		src = append(src, Source{"components.kubernetes", from})
	}
	if v := a.Release.Artifacts; v != "" {
		cc.Bootstrap.OfflineArtifacts.Source = v
		src = append(src, Source{"bootstrap.offlineArtifacts.source", from})
	}
	if v := a.Release.WorkerImage; v != "" {
		cc.Bootstrap.OCIImage = v
		src = append(src, Source{"bootstrap.ociImage", from})
	}
	return &cc, src
}

package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/network"
	"github.com/Azure/aks-flex-node/internal/task"
)

type recordHostNetwork struct{ host Host }

// RecordHostNetwork returns the task that records, once, the netfilter
// tables and chains (nft's, and iptables-legacy's) the host has before
// the node first runs, so that reset removes what the node's components
// made and nothing podman, nerdctl or an admin made. A record already
// there (a second start) is kept: it describes the host before the first.
func RecordHostNetwork(h Host) task.Task { return &recordHostNetwork{host: h} }

func (t *recordHostNetwork) Name() string { return "record-host-network" }

// hostNetworkRecord is the record's content. A record from before chains
// were recorded has nftTables only (network.Before.ChainsKnown false).
type hostNetworkRecord struct {
	network.Before
}

func (t *recordHostNetwork) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	if l.Root() != "/" {
		return task.Result{}, nil
	}
	path := l.HostNetworkRecord()
	if err := t.host.track(path); err != nil {
		return task.Result{}, err
	}
	if _, err := os.Stat(l.OnRoot(path)); err == nil {
		return task.Result{}, nil
	}
	before, err := network.Cleaner{Routes: network.Routes{Run: t.host.Exec}}.Snapshot(ctx)
	if err != nil {
		return task.Result{}, err
	}
	data, err := json.Marshal(hostNetworkRecord{Before: before})
	if err != nil {
		return task.Result{}, err
	}
	changed, err := fsutil.WriteFile(l.OnRoot(path), append(data, '\n'), 0o644)
	return task.Result{Changed: changed}, err
}

// loadHostNetworkRecord reads the record; ok is false when there is none.
func loadHostNetworkRecord(h Host) (rec hostNetworkRecord, ok bool, err error) {
	data, err := os.ReadFile(h.Layout.OnRoot(h.Layout.HostNetworkRecord()))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	return rec, true, json.Unmarshal(data, &rec)
}

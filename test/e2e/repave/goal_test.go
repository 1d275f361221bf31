package repave

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// startKeepsTheRolloutsRelease: the node runs worker image worker2 on
// kube1 (kube2-to-kube1's node upgrade put it there), its config file
// still names the first worker image. With the agent's rollout record
// saying a rollout moved the node to worker2, start converges: no
// repave back to the file's image, one line per key saying where its
// value came from; status shows the rollout and debug's rollout check is
// OK. The record is removed again for the subtests after this one.
func (e *env) startKeepsTheRolloutsRelease(t *testing.T) {
	const record = "/var/lib/aks-flex-node/rollout.json"
	rec := fleet.Record{Rollout: "r1", UID: "u1", Generation: 2, Phase: fleet.PhaseUpdated, Since: time.Now().UTC().Truncate(time.Second),
		Applied: &fleet.AppliedRelease{Rollout: "r1", Generation: 2, At: time.Now().UTC(),
			Release: v1alpha1.Release{KubernetesVersion: "v" + version, WorkerImage: worker2Ref}}}
	data, err := json.Marshal(rec)
	must(t, err)
	must(t, e.h.WriteFile(record, data, 0o600))
	defer func() { e.h.RunOK(t, "rm", "-f", record) }()
	before := e.status(t)
	out, _, err := e.start(t)
	if err != nil || !strings.Contains(out, "already joined: nothing changed") {
		t.Errorf("start on a node on its rollout's release: %v\n%s", err, out)
	}
	for _, want := range []string{
		"[start] components.kubernetes " + version + " from rollout r1 generation 2 (the config file says the same)\n",
		"[start] bootstrap.ociImage " + worker2Ref + " from rollout r1 generation 2 (the config file says " + workerRef + ")\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "repaving the node") {
		t.Errorf("start repaved the node back to the config file's worker image:\n%s", out)
	}
	after := e.status(t)
	if after.Active != before.Active || after.Last == nil || before.Last == nil || !after.Last.Started.Equal(before.Last.Started) {
		t.Errorf("the node changed: before %+v, after %+v", before, after)
	}
	text := e.h.RunOK(t, agent, "status")
	if !strings.Contains(text, "rollout:    rollout r1 generation 2: Updated") || !strings.Contains(text, "  bootstrap.ociImage "+worker2Ref+" from rollout r1 generation 2") {
		t.Errorf("status does not show the rollout:\n%s", text)
	}
	dbg, _, _ := e.h.Run(e.ctx, agent, "debug")
	if !strings.Contains(dbg, "[OK rollout]: rollout r1 generation 2: Updated") {
		t.Errorf("debug's rollout check:\n%s", dbg)
	}
}

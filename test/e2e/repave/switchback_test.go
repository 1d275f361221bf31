package repave

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// switchBack (issue 30 item 4): the fleet rollback's per-node switch back
// (lifecycle.NewSwitchBack, run here by the hidden `node switch-back`)
// puts the node back on its retained side at that side's version and
// worker image, without staging, provisioning or hashing anything (the
// bundle sources and the worker images stay untouched: 0 bytes hashed),
// the same Node, Ready and uncordoned. When the side kept by the earlier
// subtests is not usable (a failed repave, or both sides alike), a node
// upgrade to another version first makes one to switch back from; its
// time is the per-node rollout time the switch back compares with.
func (e *env) switchBack(t *testing.T) {
	s := e.status(t)
	from := s.Active
	other := otherSide(from)
	if kept := s.Machines[other]; kept.Failed != "" || kept.KubernetesVersion == "" || kept.KubernetesVersion == s.Machines[from].KubernetesVersion {
		to := joined
		if s.Machines[from].KubernetesVersion == joined {
			to = version
		}
		r, _, err := e.nodeUpgrade(t, "--kubernetes-version", to, "--drain-timeout", "2m", "--ready-timeout", "2m")
		if err != nil || r.Result != "succeeded" {
			t.Fatalf("the repave to switch back from: %v, record %+v", err, r)
		}
		t.Logf("BENCH rollout per node (stage+switch, node upgrade %s->%s, Kubernetes %s): %v", r.FromMachine, r.ToMachine, to, r.Duration)
		s = e.status(t)
		from, other = s.Active, otherSide(s.Active)
	}
	kept := s.Machines[other]
	uid := e.node(t).UID
	t.Logf("switch back %s (Kubernetes %s, %s) -> %s (Kubernetes %s, %s)", from, s.Machines[from].KubernetesVersion, s.Machines[from].ImageDigest,
		other, kept.KubernetesVersion, kept.ImageDigest)
	began := time.Now()
	out, log, err := e.h.Run(e.ctx, agent, "node", "switch-back", "--output", "json", "--drain-timeout", "2m", "--ready-timeout", "2m")
	took := time.Since(began)
	t.Logf("node switch-back: %v in %v\n%s", err, took.Round(time.Millisecond), log)
	var r struct {
		record
		SwitchBack bool `json:"switchBack"`
	}
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || err != nil || r.Result != "succeeded" || !r.SwitchBack || r.ToMachine != other || r.ToVersion != kept.KubernetesVersion {
		t.Fatalf("node switch-back: %v, record %+v (%v)\n%s", err, r, jerr, out)
	}
	if !strings.Contains(log, "node switch-back: 0 bundle bytes hashed") {
		t.Errorf("the switch back hashed bundle bytes:\n%s", log)
	}
	for _, task := range []string{"stage-node-components", "provision-machine", "install-node-components", "write-node-config", "import-images"} {
		if strings.Contains(log, "task="+task) {
			t.Errorf("the switch back ran %s:\n%s", task, log)
		}
	}
	e.checkRecovered(t, "after the switch back", other, uid, time.Time{}, kept.KubernetesVersion)
	after := e.status(t)
	if after.Machines[other].ImageDigest != kept.ImageDigest || after.Machines[other].KubernetesVersion != kept.KubernetesVersion || after.Machines[other].Failed != "" {
		t.Errorf("the retained side after the switch back: %+v, was %+v", after.Machines[other], kept)
	}
	applied, _, err := e.h.Run(e.ctx, "cat", "/var/lib/aks-flex-node/state.json")
	var a struct {
		Machine, KubernetesVersion, ImageDigest string
	}
	if jerr := json.Unmarshal([]byte(applied), &a); err != nil || jerr != nil || a.Machine != other || a.KubernetesVersion != kept.KubernetesVersion || a.ImageDigest != kept.ImageDigest {
		t.Errorf("applied state after the switch back: %+v (%v %v)", a, err, jerr)
	}
	t.Logf("BENCH switch back per node (switch only, %s->%s): record %v, command %v", from, other, r.Duration, took.Round(time.Millisecond))
}

// fleetRollback (issue 30 item 4, the product's path): with the fleet's
// objects applied (cluster prepare --fleet) and a rollout whose release
// the node already runs (Updated at once, nothing staged), `fleet
// rollback`'s spec.rollback makes the installed agent take a slot, switch
// the node back to its retained side through the daemon's RollbackHost,
// soak and report RolledBack: the node on the retained side's version,
// the rollout record's applied release dropped, no stage, provision or
// install task in the agent's journal since the request.
func (e *env) fleetRollback(t *testing.T) {
	e.prepareFleet(t) // agent_release_test.go
	s := e.status(t)
	from, to := s.Active, otherSide(s.Active)
	kept := s.Machines[to]
	if kept.Failed != "" || kept.KubernetesVersion == "" {
		t.Fatalf("no retained side to roll back to: %+v", s)
	}
	if out, err := e.cp.Kubectl(e.ctx, nil, "label", "node", nodeName, "e2e-fleet=rollback", "--overwrite"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := fmt.Sprintf(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"back"},
"spec":{"nodeSelector":{"matchLabels":{"e2e-fleet":"rollback"}},"release":{"kubernetesVersion":"v%s"},"strategy":{"maxUnavailable":1,"soak":"5s"}}}`,
		s.Machines[from].KubernetesVersion)
	if out, err := e.cp.Kubectl(e.ctx, []byte(r), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e.waitPhase(t, fleet.PhaseUpdated, 3*time.Minute)
	rs, err := fleet.NewRollouts(e.cp.AdminConfig, nil)
	must(t, err)
	asked := time.Now()
	if _, err := rs.Patch(e.ctx, "back", types.MergePatchType, []byte(`{"spec":{"rollback":{"reason":"e2e: back to the retained side","requestedBy":"e2e"}}}`)); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(t, fleet.PhaseRolledBack, 4*time.Minute)
	took := time.Since(asked)
	e.checkRecovered(t, "after the fleet rollback", to, e.node(t).UID, time.Time{}, kept.KubernetesVersion)
	log, _, _ := e.h.Run(e.ctx, "journalctl", "--no-pager", "-u", "aks-flex-node-agent", "--since", "@"+strconv.FormatInt(asked.Unix()-1, 10))
	if !strings.Contains(log, "switched back from "+from) {
		t.Errorf("the agent's journal has no switch back:\n%s", log)
	}
	for _, task := range []string{"stage-node-components", "provision-machine", "install-node-components", "write-node-config"} {
		if strings.Contains(log, "task="+task) {
			t.Errorf("the fleet rollback ran %s", task)
		}
	}
	rec, _, _ := e.h.Run(e.ctx, "cat", "/var/lib/aks-flex-node/rollout.json")
	if strings.Contains(rec, `"applied"`) {
		t.Errorf("the rollout record still names the release: %s", rec)
	}
	t.Logf("BENCH fleet rollback of one node (request to RolledBack, soak 5s, %s->%s): %v", from, to, took.Round(100*time.Millisecond))
}

// waitPhase waits for the node's FlexNodeRelease condition to say phase.
func (e *env) waitPhase(t *testing.T, phase fleet.Phase, within time.Duration) {
	t.Helper()
	e.waitRelease(t, "the node reports "+string(phase), within, func(nr fleet.NodeRelease) bool { return nr.Phase == phase })
}

package repave

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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

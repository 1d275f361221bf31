package fleetrollout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// bundlesDir is where the agent stages bundles on a host
// (layout.BundlesDir): the filesystem the plan finds too small on one.
const bundlesDir = "/var/lib/aks-flex-node/bundles"

// plan: `fleet plan -f rollout.yaml` of release B (maxUnavailable 50%),
// while one host's bundles dir is a filesystem that holds what it
// staged before (release A's bundle) and 8 MiB more: B's bundle does not
// fit. That host's verdict is Failed at stage, DiskFull, from the
// staging-space check before any pull; the other three report Staged;
// the rollout's status and `fleet status` say so; no Node is cordoned or
// NotReady and no slot is taken.
func (w *waves) plan(t *testing.T) {
	bad := w.hosts[1]
	w.shrinkBundles(t, bad)
	w.waitFollowing(t)
	nw := watchNodes(t, w.cp.Client)
	ro := rollout(wavesRollout, w.rel.release("b"), 1, soak)
	half := intstr.FromString("50%")
	ro.Spec.Strategy.MaxUnavailable = &half
	file := filepath.Join(t.TempDir(), "rollout.json")
	data, err := json.MarshalIndent(ro, "", "  ")
	must(t, err)
	must(t, os.WriteFile(file, data, 0o644))
	began := time.Now()
	out, err := w.fleetCLI(w.ctx, "plan", "-f", file)
	must(t, err)
	t.Logf("fleet plan -f rollout.json:\n%s", out)
	gen := w.get(t, wavesRollout).Generation
	var got *v1alpha1.FlexNodeRollout
	var st v1alpha1.RolloutStatus
	w.waitFor(t, "a verdict from every node of the plan", 10*time.Minute, func(ctx context.Context) error {
		var err error
		if got, err = w.rollouts.Get(ctx, wavesRollout); err != nil {
			return err
		}
		st = got.Status
		if p := st.Plan; st.ObservedGeneration != gen || p == nil || p.Pending != 0 || p.Ready+p.NotReady != int32(len(w.hosts)) {
			return fmt.Errorf("status %+v plan %+v", st, p)
		}
		return nil
	})
	planned := time.Since(began)
	r, err := w.release(w.ctx, bad.name)
	must(t, err)
	t.Logf("%s: %s: %s", bad.name, r, r.Message)
	// The staging-space check says so from the bundle's manifests, before
	// a byte of it is pulled.
	if r.Rollout != wavesRollout || r.Generation != gen || r.Phase != fleet.PhaseFailed || r.Step != fleet.StepStage || r.Reason != "DiskFull" ||
		!strings.Contains(r.Message, "staging-space") || !strings.Contains(r.Message, "does not fit") {
		t.Errorf("%s: verdict %+v; want Failed at stage, DiskFull, the staging-space check saying the bundle does not fit", bad.name, r)
	}
	for _, m := range w.hosts {
		if r, err := w.release(w.ctx, m.name); m != bad && (err != nil || r.Rollout != wavesRollout || r.Generation != gen || r.Phase != fleet.PhaseStaged) {
			t.Errorf("%s: verdict %+v (%v); want Staged at generation %d", m.name, r, err, gen)
		}
	}
	if p := st.Plan; p.Ready != 3 || p.NotReady != 1 || len(st.FailedNodes) != 1 || st.FailedNodes[0].Name != bad.name || st.FailedNodes[0].Reason != "DiskFull" {
		t.Errorf("plan status: %+v, failed %+v; want 3 ready, %s not ready (DiskFull)", *p, st.FailedNodes, bad.name)
	}
	c := condition(got, v1alpha1.ConditionProgressing)
	if c == nil || !strings.Contains(c.Message, "staged 3/4: 1 failed") || !strings.Contains(c.Message, bad.name) {
		t.Errorf("Progressing %+v; want it to say staged 3/4, naming %s", c, bad.name)
	}
	fs, err := w.fleetCLI(w.ctx, "status", wavesRollout)
	must(t, err)
	t.Logf("fleet status %s:\n%s", wavesRollout, fs)
	if !strings.Contains(fs, "plan: 3 ready, 1 not ready") || !strings.Contains(fs, bad.name) || !strings.Contains(fs, "DiskFull") {
		t.Errorf("fleet status does not show the plan's verdicts (3 ready, %s DiskFull)", bad.name)
	}
	if d := nw.everDisrupted(began); len(d) > 0 {
		t.Errorf("a plan cordoned or made NotReady %v. Timeline:\n%s", d, nw.timeline(began))
	}
	if h, err := w.holders(w.ctx, wavesRollout); err != nil || len(h) != 0 {
		t.Errorf("slots of a plan held: %v %v", h, err)
	}
	ws := nw.windows(began, wavesRollout, gen)
	for _, m := range w.hosts {
		o := ws[m.name]
		if o == nil {
			continue
		}
		at := o.Phase[fleet.PhaseStaged]
		if m == bad {
			at = o.Phase[fleet.PhaseFailed]
		}
		if !at.IsZero() {
			w.stagedIn[m.name] = at.Sub(began)
		}
		t.Logf("BENCH waves plan node=%s verdict-after=%v", m.name, w.stagedIn[m.name].Round(time.Millisecond))
	}
	t.Logf("BENCH waves plan nodes=%d apply-to-all-verdicts=%v", len(w.hosts), planned.Round(time.Millisecond))
}

// shrinkBundles mounts on m's bundles dir a filesystem of what is in it
// (release A's staged bundle) plus 8 MiB, with that content: the next
// bundle m stages does not fit. fixBundles takes it away again.
func (w *waves) shrinkBundles(t *testing.T, m *host) {
	out := m.h.ShellOK(t, `set -eu
d=`+bundlesDir+`
keep=$(dirname "$d")/.e2e-bundles-copy
rm -rf "$keep"
cp -a "$d" "$keep"
used=$(du -s -B1 "$d" | cut -f1)
mount -t tmpfs -o size=$(( used + 8 * 1024 * 1024 )),mode=0755 e2e-small-disk "$d"
cp -a "$keep/." "$d/"
rm -rf "$keep"
df -B1 --output=size,avail "$d" | tail -1`)
	t.Logf("%s: %s is a small filesystem now (size, free bytes): %s", m.name, bundlesDir, strings.TrimSpace(out))
	t.Cleanup(func() { w.fixBundles(t, m) })
}

// fixBundles unmounts the small filesystem: the host's own disk is
// under it again, with what was staged there before.
func (w *waves) fixBundles(t *testing.T, m *host) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, stderr, err := m.h.Shell(ctx, "! mountpoint -q "+bundlesDir+" || umount "+bundlesDir); err != nil {
		t.Errorf("%s: unmount the small filesystem on %s: %v\n%s", m.name, bundlesDir, err, stderr)
	}
}

// followingLine is the agent's journal line once it follows the
// rollouts (fleet.Agent.Run).
const followingLine = "rollout: following the FlexNodeRollouts that select this Node"

// waitFollowing waits for every host's agent to follow the rollouts, so
// that the plan's time is the plan's: a node that has just joined
// starts following at its agent's next pass (the reconcile interval,
// 1m, after the join), which is no part of planning.
func (w *waves) waitFollowing(t *testing.T) {
	began := time.Now()
	for _, m := range w.hosts {
		w.waitFor(t, m.name+"'s agent following the rollouts", 3*time.Minute, func(ctx context.Context) error {
			j, _, err := m.h.Run(ctx, "journalctl", "--no-pager", "-u", "aks-flex-node-agent", "-o", "cat")
			if err == nil && !strings.Contains(j, followingLine) {
				err = fmt.Errorf("no %q in its journal yet", followingLine)
			}
			return err
		})
	}
	t.Logf("every agent follows the rollouts (waited %v after the join)", time.Since(began).Round(time.Second))
}

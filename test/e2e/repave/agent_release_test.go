package repave

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
)

// The agent's versions in fleetAgentRelease: the installed one is
// buildAgent's; the release's is built with another version; the broken
// one answers the version check and exits 1 when run as the agent.
const (
	releaseAgentVersion = "v1.0.1-e2e"
	brokenAgentVersion  = "v1.0.2-e2e"
	// e2eCAFile is where the test's CA is put in the host's trust store
	// (Go reads every file of /etc/ssl/certs).
	e2eCAFile = "/etc/ssl/certs/aks-flex-node-e2e-ca.pem"
)

// fleetAgentRelease (issue 29 item 2, issue 30 item 5): a rollout whose
// release is a new agent binary (served over https from the host's own
// loopback by this test) makes the installed agent stage it into its
// inactive slot, take a slot, switch to it under the blue/green upgrade;
// the new agent confirms itself, resumes the rollout from the Record,
// soaks and reports Updated; the slot is free; the machine was never
// switched nor the Node cordoned. Then a release of an agent binary and a
// Kubernetes version: the agent first, then the new agent switches the
// machine (here the earlier agent version: how agents are moved back).
// Then a rollout of a broken agent binary (right checksum, exits 1):
// recovery puts the last-good agent back, which reports Failed at agent
// (AgentRolledBack), keeps its slot, and the rollout says Paused.
func (e *env) fleetAgentRelease(t *testing.T) {
	dist := t.TempDir()
	buildAgentVersion(t, dist+"/aks-flex-node-next", releaseAgentVersion)
	buildAgentVersion(t, dist+"/aks-flex-node-prev", "v1.0.0-e2e")
	next, err := os.ReadFile(dist + "/aks-flex-node-next")
	must(t, err)
	prev, err := os.ReadFile(dist + "/aks-flex-node-prev")
	must(t, err)
	broken := []byte("#!/bin/sh\n# An agent that passes the version check and exits 1 as the agent.\nif [ \"$1\" = version ]; then\n\techo '{\"version\":\"" +
		brokenAgentVersion + "\",\"gitCommit\":\"e2e\",\"buildTime\":\"e2e\"}'\n\texit 0\nfi\nexit 1\n")
	base := e.serveAgents(t, map[string][]byte{"/next": next, "/prev": prev, "/broken": broken})
	// After the CA is in the host's trust store: the restart makes the
	// agent read it (Go reads the system roots once per process).
	e.prepareFleet(t)
	if out, err := e.cp.Kubectl(e.ctx, nil, "label", "node", nodeName, "e2e-fleet=agent", "--overwrite"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e.agentOnlyRelease(t, base+"/next", next)
	e.agentAndNodeRelease(t, base+"/prev", prev)
	e.brokenAgentRelease(t, base+"/broken", broken, prev, "v1.0.0-e2e", dist+"/aks-flex-node-prev")
}

func (e *env) agentOnlyRelease(t *testing.T, url string, next []byte) {
	before := e.status(t).Active
	uid := e.node(t).UID
	began := time.Now()
	e.createAgentRollout(t, "agent-next", url, sum(next), "")
	e.waitRelease(t, "agent-next Updated", 5*time.Minute, func(nr fleet.NodeRelease) bool {
		return nr.Rollout == "agent-next" && nr.Phase == fleet.PhaseUpdated
	})
	took := time.Since(began)
	e.checkAgent(t, releaseAgentVersion, next)
	e.checkSlotsOf(t, "agent-next", "")
	if n := e.node(t); n.UID != uid || n.Spec.Unschedulable {
		t.Errorf("the Node after an agent-only release: uid %s (was %s), unschedulable %v", n.UID, uid, n.Spec.Unschedulable)
	}
	if a := e.status(t).Active; a != before {
		t.Errorf("an agent-only release switched the machine: %s, was %s", a, before)
	}
	t.Logf("BENCH agent-only release, apply to Updated (soak 5s): %v", took.Round(100*time.Millisecond))
	e.deleteRollout(t, "agent-next")
}

// agentAndNodeRelease: a release of an agent binary and a Kubernetes
// version; the node reports step agent before drain and switch (the new
// agent switches), ends on the other side at that version, on the
// release's agent.
func (e *env) agentAndNodeRelease(t *testing.T, url string, bin []byte) {
	s := e.status(t)
	from := s.Active
	target := version
	if s.Machines[from].KubernetesVersion == version {
		target = joined
	}
	uid := e.node(t).UID
	began := time.Now()
	e.createAgentRollout(t, "agent-and-node", url, sum(bin), `,"kubernetesVersion":"v`+target+`"`)
	var steps []string
	e.waitRelease(t, "agent-and-node Updated", 8*time.Minute, func(nr fleet.NodeRelease) bool {
		if nr.Rollout == "agent-and-node" && nr.Step != "" && (len(steps) == 0 || steps[len(steps)-1] != nr.Step) {
			steps = append(steps, nr.Step)
		}
		return nr.Rollout == "agent-and-node" && nr.Phase == fleet.PhaseUpdated
	})
	took := time.Since(began)
	// The drain is not required: the agent reports it before the switch,
	// but a report is best effort (a Node write that fails is logged,
	// not retried), and the switch is what the node must show.
	if a, sw := slices.Index(steps, fleet.StepAgent), slices.Index(steps, fleet.StepSwitch); a < 0 || sw < a || slices.Index(steps[a:], fleet.StepDrain) > slices.Index(steps[a:], fleet.StepSwitch) {
		t.Errorf("steps seen %v: want agent, then (drain and) switch", steps)
	}
	e.checkAgent(t, "v1.0.0-e2e", bin)
	e.checkRecovered(t, "after the agent and node release", otherSide(from), uid, time.Time{}, target)
	e.checkSlotsOf(t, "agent-and-node", "")
	t.Logf("BENCH agent and Kubernetes %s release (%s->%s), apply to Updated (soak 5s): %v; steps %v", target, from, otherSide(from), took.Round(100*time.Millisecond), steps)
	e.deleteRollout(t, "agent-and-node")
}

// brokenAgentRelease: the broken binary is rolled back by recovery to
// the last-good agent (lastGood, at version good), which reports Failed
// at agent and keeps its slot; the rollout is Paused.
//
// `fleet resume` (cli, the operator's way) retries it from stage, as any
// failure: with the same broken binary it fails the same way again.
func (e *env) brokenAgentRelease(t *testing.T, url string, broken, lastGood []byte, good, cli string) {
	began := time.Now()
	e.createAgentRollout(t, "agent-broken", url, sum(broken), "")
	var stepAt time.Time
	e.waitRelease(t, "agent-broken Failed at agent", 5*time.Minute, func(nr fleet.NodeRelease) bool {
		if nr.Rollout == "agent-broken" && nr.Step == fleet.StepAgent && stepAt.IsZero() {
			stepAt = time.Now()
		}
		return nr.Rollout == "agent-broken" && nr.Phase == fleet.PhaseFailed
	})
	failedAt := time.Now()
	nr := e.release(t)
	t.Logf("the failure on the Node: %s: %s", nr, nr.Message)
	if nr.Step != fleet.StepAgent || nr.Reason != fleet.ReasonAgentRolledBack || !strings.Contains(nr.Message, "rolled-back") {
		t.Errorf("the broken agent's failure: %s", nr)
	}
	e.checkAgent(t, good, lastGood)
	e.checkSlotsOf(t, "agent-broken", fleet.ReasonAgentRolledBack)
	e.waitPaused(t, "agent-broken")
	if stepAt.IsZero() {
		stepAt = began
	}
	t.Logf("BENCH broken agent release: apply to Failed %v; agent step seen to Failed (switch, exit, recovery, old agent's report) %v",
		failedAt.Sub(began).Round(100*time.Millisecond), failedAt.Sub(stepAt).Round(100*time.Millisecond))

	first := nr.Since
	if out, err := exec.CommandContext(e.ctx, cli, "fleet", "resume", "agent-broken", "--kubeconfig", e.cp.AdminKubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("fleet resume: %v\n%s", err, out)
	}
	// Failed again with a later Since: it left Failed and came back.
	e.waitRelease(t, "agent-broken retried and Failed at agent again", 5*time.Minute, func(nr fleet.NodeRelease) bool {
		return nr.Rollout == "agent-broken" && nr.Phase == fleet.PhaseFailed && nr.Since.After(first)
	})
	if nr := e.release(t); nr.Step != fleet.StepAgent || nr.Reason != fleet.ReasonAgentRolledBack {
		t.Errorf("after fleet resume: %s, want Failed at agent (AgentRolledBack) again", nr)
	}
	e.checkAgent(t, good, lastGood)
	e.checkSlotsOf(t, "agent-broken", fleet.ReasonAgentRolledBack)
	e.deleteRollout(t, "agent-broken")
}

// checkAgent checks the running agent's version, the binary current
// names, and the version on the Node (fleet status's AGENT, written by
// the agent at its start).
func (e *env) checkAgent(t *testing.T, want string, bin []byte) {
	t.Helper()
	if v := e.agentVersion(t); v != want {
		t.Errorf("the agent runs %s, want %s", v, want)
	}
	if got := e.currentAgentSum(t); got != sum(bin) {
		t.Errorf("current names a binary of sha256 %s, want %s", got, sum(bin))
	}
	if err := wait.PollUntilContextTimeout(e.ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		return e.node(t).Annotations[fleet.AgentVersionAnnotation] == want, nil
	}); err != nil {
		t.Errorf("the Node's %s: %q, want %s", fleet.AgentVersionAnnotation, e.node(t).Annotations[fleet.AgentVersionAnnotation], want)
	}
}

// prepareFleet applies the fleet's objects (cluster prepare --fleet) and
// restarts the agent, which otherwise waits before it looks again at a
// cluster it found without them.
func (e *env) prepareFleet(t *testing.T) {
	t.Helper()
	objs, err := clusterprep.FleetObjects()
	must(t, err)
	data, err := clusterprep.Render("cluster prepare --fleet", objs)
	must(t, err)
	if out, err := e.cp.Kubectl(e.ctx, data, "apply", "-f", "-"); err != nil {
		t.Fatalf("cluster prepare --fleet: %v\n%s", err, out)
	}
	if out, err := e.cp.Kubectl(e.ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/"+v1alpha1.Resource+"."+v1alpha1.Group); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e.h.RunOK(t, "systemctl", "restart", "aks-flex-node-agent")
}

// serveAgents serves files over https on the host's loopback (a listener
// in its network namespace, served by this process), with a CA made here
// and put in the host's trust store; it returns the base URL.
func (e *env) serveAgents(t *testing.T, files map[string][]byte) string {
	t.Helper()
	caPEM, cert := kubetest.LoopbackServingCert(t)
	must(t, e.h.WriteFile(e2eCAFile, caPEM, 0o644))
	t.Cleanup(func() { _, _, _ = e.h.Run(context.Background(), "rm", "-f", e2eCAFile) })
	ln, err := e.h.ListenTCP("127.0.0.1:0")
	must(t, err)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, ok := files[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(b)
		})}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

// createAgentRollout creates rollout name whose release is the agent at
// url (sha) and more, JSON fields after it (",\"kubernetesVersion\":...").
func (e *env) createAgentRollout(t *testing.T, name, url, sha, more string) {
	t.Helper()
	r := fmt.Sprintf(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":%q},
"spec":{"nodeSelector":{"matchLabels":{"e2e-fleet":"agent"}},"release":{"agent":{"url":%q,"sha256":%q}%s},"strategy":{"maxUnavailable":1,"soak":"5s","drainTimeout":"2m"}}}`,
		name, url, sha, more)
	if out, err := e.cp.Kubectl(e.ctx, []byte(r), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func (e *env) deleteRollout(t *testing.T, name string) {
	t.Helper()
	if out, err := e.cp.Kubectl(e.ctx, nil, "delete", "fnr", name, "--wait=true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// waitRelease waits for the node's FlexNodeRelease condition to satisfy
// ok, logging each one it sees. It watches the Node, so ok sees every
// update the agent wrote (a step that lasts less than a poll interval
// included: a drain with nothing to evict does); a watch that ends is
// taken up again from a fresh read.
func (e *env) waitRelease(t *testing.T, what string, within time.Duration, ok func(fleet.NodeRelease) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, within)
	defer cancel()
	last := ""
	look := func(n *corev1.Node) bool {
		nr, found, err := fleet.ReadNodeRelease(n)
		if !found || err != nil {
			return false
		}
		if s := nr.String(); s != last {
			t.Logf("node: %s", s)
			last = s
		}
		return ok(nr)
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		return e.cp.Client.CoreV1().Nodes().Watch(ctx, o)
	}}
	err := ctx.Err()
	for ctx.Err() == nil {
		var n *corev1.Node
		if n, err = e.cp.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
			if look(n) {
				return
			}
			var w *watchtools.RetryWatcher
			if w, err = watchtools.NewRetryWatcherWithContext(ctx, n.ResourceVersion, lw); err == nil {
				_, err = watchtools.UntilWithoutRetry(ctx, w, func(ev watch.Event) (bool, error) {
					n, isNode := ev.Object.(*corev1.Node)
					return isNode && look(n), nil
				})
				w.Stop()
				if err == nil {
					return
				}
			}
		}
		// The watch ended (its resource version too old, say): read again.
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	j, _, _ := e.h.Run(context.Background(), "journalctl", "--no-pager", "-n", "120", "-u", "aks-flex-node-agent", "-u", "aks-flex-node-recovery")
	t.Fatalf("%s: never within %v (last %q): %v\njournal:\n%s", what, within, last, err, j)
}

func (e *env) release(t *testing.T) fleet.NodeRelease {
	t.Helper()
	nr, _, err := fleet.ReadNodeRelease(e.node(t))
	must(t, err)
	return nr
}

// agentVersion is the version the running agent service's binary reports.
func (e *env) agentVersion(t *testing.T) string {
	t.Helper()
	out := e.h.RunOK(t, "/bin/sh", "-c", `exe=$(readlink -f /proc/$(systemctl show -p MainPID --value aks-flex-node-agent)/exe) && "$exe" version --output json`)
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("the running agent's version: %v: %s", err, out)
	}
	return v.Version
}

func (e *env) currentAgentSum(t *testing.T) string {
	t.Helper()
	out := e.h.RunOK(t, "sha256sum", prefix+"/lib/current")
	return strings.Fields(out)[0]
}

// checkSlotsOf checks the rollout's slots: failed "" wants none held;
// otherwise one held by this node, marked failed with that reason. It
// waits for them (30 s at most): the agent writes Updated on the Node
// before it frees the slot (agent_work.go), so a slot can still be held
// for a moment after the Node says Updated.
func (e *env) checkSlotsOf(t *testing.T, rollout, failed string) {
	t.Helper()
	store, err := fleet.NewSlotStore(e.cp.AdminConfig, nil, v1alpha1.Namespace)
	must(t, err)
	var held map[string]string
	err = wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := store.List(ctx)
		if err != nil {
			return false, nil
		}
		held = map[string]string{}
		for _, l := range list.Items {
			if !strings.HasPrefix(l.Name, rollout+"-slot-") || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				continue
			}
			if h, ok := fleet.ParseHolder(*l.Spec.HolderIdentity); ok {
				held[h.Node] = l.Annotations[fleet.AnnotationFailedReason]
			}
		}
		if failed == "" {
			return len(held) == 0, nil
		}
		return len(held) == 1 && held[nodeName] == failed, nil
	})
	switch {
	case err == nil:
	case failed == "":
		t.Errorf("slots of %s still held after 30 s: %v", rollout, held)
	default:
		t.Errorf("slots of %s: %v, want %s's, failed %s", rollout, held, nodeName, failed)
	}
}

// waitPaused waits for the rollout's status to say Paused (written by the
// elected status writer, this host's agent).
func (e *env) waitPaused(t *testing.T, name string) {
	t.Helper()
	rs, err := fleet.NewRollouts(e.cp.AdminConfig, nil)
	must(t, err)
	var last string
	err = wait.PollUntilContextTimeout(e.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ro, err := rs.Get(ctx, name)
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionPaused)
		if c != nil {
			last = string(c.Status) + " " + c.Reason + ": " + c.Message
		}
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, nodeName), nil
	})
	if err != nil {
		t.Errorf("rollout %s never Paused naming %s (last %q): %v", name, nodeName, last, err)
	}
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// fleetAPI is a stub API server for the fleet commands: one rollout
// (edge-b, unless crd is false: then the group is not served), Nodes, and
// the slots; it records each request with its body.
type fleetAPI struct {
	mu       sync.Mutex
	crd      bool
	requests []string
}

const (
	fleetRolloutJSON = `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"edge-b","generation":2,"resourceVersion":"7","annotations":{"flexnode.azure.com/resumed-at":"2026-12-06T05:00:00Z"}},
"spec":{"nodeSelector":{"matchLabels":{"pool":"edge"}},"release":{"kubernetesVersion":"v1.35.4"},"paused":true},
"status":{"observedGeneration":2,"selected":2,"updated":1,"failed":1,"failedNodes":[{"name":"b","step":"switch","reason":"RolledBack"}],"managedElsewhere":["m"],
"conditions":[{"type":"Paused","status":"True","reason":"NodesFailed","message":"1 failed and keep their slots: b","lastTransitionTime":"2026-12-06T05:00:00Z"}]}}`
)

func (f *fleetAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
	crd := f.crd
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	notFound := func(details string) {
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404`+details+`}`)
	}
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/apis/flexnode.azure.com/") && !crd:
		notFound("")
	case p == "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts":
		_, _ = io.WriteString(w, `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRolloutList","metadata":{},"items":[`+fleetRolloutJSON+`]}`)
	case p == "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts/edge-b":
		_, _ = io.WriteString(w, fleetRolloutJSON)
	case strings.HasPrefix(p, "/apis/flexnode.azure.com/v1alpha1/flexnoderollouts/"):
		notFound(`,"details":{"name":"` + filepath.Base(p) + `","group":"flexnode.azure.com","kind":"flexnoderollouts"}`)
	case p == "/apis/flexnode.azure.com/v1alpha1/namespaces/aks-flex-node/flexnodeslots" && r.Method == http.MethodGet:
		_, _ = io.WriteString(w, `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeSlotList","metadata":{},"items":[
{"metadata":{"name":"edge-b-slot-0","resourceVersion":"3","annotations":{"flexnode.azure.com/failed-reason":"RolledBack","flexnode.azure.com/failed-step":"switch"}},"spec":{"holderIdentity":"b/uid-b/boot"}},
{"metadata":{"name":"edge-b-slot-1","resourceVersion":"4"},"spec":{"holderIdentity":"a/uid-a/boot"}},
{"metadata":{"name":"other-slot-0","resourceVersion":"5","annotations":{"flexnode.azure.com/failed-reason":"DrainTimeout"}},"spec":{"holderIdentity":"x/uid-x/boot"}}]}`)
	case strings.HasPrefix(p, "/apis/flexnode.azure.com/v1alpha1/namespaces/aks-flex-node/flexnodeslots/") && r.Method == http.MethodPut:
		_, _ = w.Write(body)
	case p == "/api/v1/nodes":
		now := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
		nodes := corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}}
		for _, n := range []struct {
			name string
			rel  *fleet.NodeRelease
		}{
			{"a", &fleet.NodeRelease{Rollout: "edge-b", Generation: 2, Phase: fleet.PhaseUpdated, Step: "soak"}},
			{"b", &fleet.NodeRelease{Rollout: "edge-b", Generation: 2, Phase: fleet.PhaseFailed, Step: "switch", Reason: "RolledBack", Message: "kubelet\nexited"}},
			{"c", &fleet.NodeRelease{Rollout: "edge-b", Generation: 1, Phase: fleet.PhaseUpdated}},
			{"d", nil},
		} {
			node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"pool": "edge"}}}
			if n.name == "a" {
				node.Annotations = map[string]string{fleet.AgentVersionAnnotation: "v1.0.1"}
			}
			if n.rel != nil {
				fleet.SetNodeRelease(&node, *n.rel, now)
			}
			nodes.Items = append(nodes.Items, node)
		}
		nodes.Items = append(nodes.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "z", Labels: map[string]string{"pool": "core"}}})
		_ = json.NewEncoder(w).Encode(nodes)
	case r.Method == http.MethodPatch:
		_, _ = io.WriteString(w, fleetRolloutJSON)
	default:
		notFound("")
	}
}

func (f *fleetAPI) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// startFleetAPI serves the stub and writes a kubeconfig naming it.
func startFleetAPI(t *testing.T, crd bool) (*fleetAPI, string) {
	t.Helper()
	f := &fleetAPI{crd: crd}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + srv.URL +
		"\nusers:\n- name: u\n  user:\n    token: admin\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
	if err := os.WriteFile(kc, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, kc
}

// fleet status: the rollout's counts, conditions, the nodes it selects
// (phase, step, since, reason, slot) and not the others; -o json the
// same as a document.
func TestFleetStatus(t *testing.T) {
	_, kc := startFleetAPI(t, true)
	out, errOut, code := run(t, "fleet", "status", "--kubeconfig", kc)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"edge-b   2           2         0       0         1        1       true",
		"Paused=True NodesFailed: 1 failed and keep their slots: b",
		"managed elsewhere (AKS through ARM): m",
		"a     Updated                 soak    2026-12-06T05:00:00Z  -                           edge-b-slot-1                       v1.0.1",
		"SLOT                                AGENT",
		"b     Failed                  switch  2026-12-06T05:00:00Z  RolledBack: kubelet exited  edge-b-slot-0 (failed: RolledBack)",
		"c     Updated (generation 1)",
		"d     -",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "  z ") {
		t.Errorf("a node the rollout does not select:\n%s", out)
	}
	out, _, code = run(t, "fleet", "status", "edge-b", "-o", "json", "--kubeconfig", kc)
	var views []rolloutView
	if code != 0 || json.Unmarshal([]byte(out), &views) != nil || len(views) != 1 || len(views[0].Nodes) != 4 || views[0].Nodes[1].Slot == "" || views[0].Nodes[0].Agent != "v1.0.1" || views[0].Status.Failed != 1 {
		t.Errorf("json: exit %d\n%s", code, out)
	}
}

// fleet pause patches spec.paused alone; fleet resume frees the failed
// slots of the rollout only (not another rollout's, not a working
// node's), then unpauses and stamps resumed-at.
func TestFleetPauseAndResume(t *testing.T) {
	f, kc := startFleetAPI(t, true)
	if _, errOut, code := run(t, "fleet", "pause", "edge-b", "--kubeconfig", kc); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	got := f.log()
	if last := got[len(got)-1]; last != `PATCH /apis/flexnode.azure.com/v1alpha1/flexnoderollouts/edge-b application/merge-patch+json {"spec":{"paused":true}}` {
		t.Errorf("pause sent %q", last)
	}
	before := len(got)
	out, errOut, code := run(t, "fleet", "resume", "edge-b", "--kubeconfig", kc)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errOut)
	}
	var puts []string
	patch := -1
	for i, r := range f.log()[before:] {
		if strings.HasPrefix(r, "PUT ") {
			puts = append(puts, r)
		}
		if strings.HasPrefix(r, "PATCH ") {
			patch = i
			if !strings.Contains(r, `"flexnode.azure.com/resumed-at":"`) || !strings.Contains(r, `"spec":{"paused":false}`) {
				t.Errorf("resume patch %q", r)
			}
		}
	}
	if len(puts) != 1 || !strings.Contains(puts[0], "/flexnodeslots/edge-b-slot-0 ") || strings.Contains(puts[0], "holderIdentity") || strings.Contains(puts[0], "failed-") {
		t.Errorf("slot writes %q", puts)
	}
	if patch < 0 || !strings.Contains(out, "freed slot edge-b-slot-0 (held by failed node b)") {
		t.Errorf("resume output %q (patch at %d)", out, patch)
	}
}

// Errors name the rollout and what to do.
func TestFleetErrors(t *testing.T) {
	_, kc := startFleetAPI(t, false)
	_, errOut, code := run(t, "fleet", "status", "--kubeconfig", kc)
	if code != 1 || !strings.Contains(errOut, "cluster prepare --fleet") {
		t.Errorf("no CRD: exit %d: %s", code, errOut)
	}
	_, kc = startFleetAPI(t, true)
	_, errOut, code = run(t, "fleet", "resume", "edge-c", "--kubeconfig", kc)
	if code != 1 || !strings.Contains(errOut, "resume edge-c: no rollout edge-c in the cluster") {
		t.Errorf("no rollout: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, "fleet", "pause", "--kubeconfig", kc)
	if code != 2 {
		t.Errorf("pause without a name: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, "fleet", "status", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if code != 2 || !strings.Contains(errOut, "--kubeconfig") {
		t.Errorf("a missing kubeconfig: exit %d: %s", code, errOut)
	}
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

func ownedPod(ns, name, kind, owner string, uid types.UID) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if kind != "" {
		yes := true
		api := "apps/v1"
		if kind == "Job" {
			api = "batch/v1"
		}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: api, Kind: kind, Name: owner, UID: uid, Controller: &yes}}
	}
	return p
}

// The controllers noted before a drain are the ReplicaSets and
// StatefulSets of the node's pods, each once; DaemonSets (checked apart),
// Jobs and bare pods are not.
func TestWorkloadsOf(t *testing.T) {
	got := workloadsOf([]corev1.Pod{
		ownedPod("default", "web-1", "ReplicaSet", "web-5d8", "rs1"),
		ownedPod("default", "web-2", "ReplicaSet", "web-5d8", "rs1"),
		ownedPod("db", "pg-0", "StatefulSet", "pg", "ss1"),
		ownedPod("kube-system", "proxy-x", "DaemonSet", "proxy", "ds1"),
		ownedPod("default", "once-x", "Job", "once", "j1"),
		ownedPod("default", "bare", "", "", ""),
	})
	want := []workload{{"ReplicaSet", "default", "web-5d8", "rs1"}, {"StatefulSet", "db", "pg", "ss1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workloadsOf = %v, want %v", got, want)
	}
}

// A controller short of ready replicas makes the soak wait within the
// grace and fails it (PodsNotBack, naming it) after; one deleted or made
// anew is not waited for; a cluster that does not grant the read skips
// the check, saying so once.
func TestWorkloadCheck(t *testing.T) {
	web := workload{"ReplicaSet", "default", "web-5d8", "rs1"}
	pg := workload{"StatefulSet", "db", "pg", "ss1"}
	gone := workload{"ReplicaSet", "default", "old", "rs0"}
	anew := workload{"StatefulSet", "db", "redis", "ss2"}
	replicas := map[string]workloadReplicas{
		"web-5d8": {UID: "rs1", Want: 2, Ready: 1},
		"pg":      {UID: "ss1", Want: 1, Ready: 1},
		"redis":   {UID: "ss-other", Want: 3, Ready: 0},
	}
	var forbid bool
	get := func(_ context.Context, w workload) (workloadReplicas, error) {
		if forbid {
			return workloadReplicas{}, apierrors.NewForbidden(corev1.Resource("replicasets"), w.Name, errors.New("no"))
		}
		r, ok := replicas[w.Name]
		if !ok {
			return r, apierrors.NewNotFound(corev1.Resource("replicasets"), w.Name)
		}
		return r, nil
	}
	since := time.Unix(1_000_000, 0)
	now := since.Add(time.Minute)
	var logged []string
	c := &workloadCheck{get: get, workloads: []workload{web, pg, gone, anew}, now: func() time.Time { return now },
		log: func(msg string, _ ...any) { logged = append(logged, msg) }}
	err := c.back(t.Context(), since)
	if !errors.Is(err, fleet.ErrSoakNotYet) || !strings.Contains(err.Error(), "ReplicaSet default/web-5d8 (1/2 ready)") || strings.Contains(err.Error(), "redis") {
		t.Fatalf("one short within the grace: %v", err)
	}
	now = since.Add(workloadGrace + time.Second)
	var se *fleet.StepError
	if err := c.back(t.Context(), since); !errors.As(err, &se) || se.Reason != "PodsNotBack" || se.Step != fleet.StepSoak || errors.Is(err, fleet.ErrSoakNotYet) {
		t.Fatalf("one short after the grace: %v", err)
	}
	replicas["web-5d8"] = workloadReplicas{UID: "rs1", Want: 2, Ready: 2}
	if err := c.back(t.Context(), since); err != nil {
		t.Fatalf("all back: %v", err)
	}
	forbid = true
	for range 2 {
		if err := c.back(t.Context(), since); err != nil {
			t.Fatalf("forbidden: %v", err)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "cluster prepare --fleet") {
		t.Errorf("logged %q, want one line saying how to grant the read", logged)
	}
}

// The read is one GET of apps/v1 with the node's HTTP client: replicas
// (1 when unset) and ready replicas; the API server's Status answers are
// typed errors.
func TestGetWorkloadReplicas(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/apps/v1/namespaces/default/replicasets/web-5d8":
			fmt.Fprint(w, `{"kind":"ReplicaSet","metadata":{"uid":"rs1"},"spec":{"replicas":3},"status":{"readyReplicas":2}}`)
		case "/apis/apps/v1/namespaces/db/statefulsets/pg":
			fmt.Fprint(w, `{"kind":"StatefulSet","metadata":{"uid":"ss1"},"spec":{},"status":{}}`)
		case "/apis/apps/v1/namespaces/db/statefulsets/secret":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	defer srv.Close()
	r, err := getWorkloadReplicas(t.Context(), srv.Client(), srv.URL, workload{"ReplicaSet", "default", "web-5d8", "rs1"})
	if err != nil || r != (workloadReplicas{UID: "rs1", Want: 3, Ready: 2}) {
		t.Errorf("ReplicaSet: %+v %v", r, err)
	}
	r, err = getWorkloadReplicas(t.Context(), srv.Client(), srv.URL, workload{"StatefulSet", "db", "pg", "ss1"})
	if err != nil || r != (workloadReplicas{UID: "ss1", Want: 1, Ready: 0}) {
		t.Errorf("StatefulSet without replicas: %+v %v", r, err)
	}
	if _, err := getWorkloadReplicas(t.Context(), srv.Client(), srv.URL, workload{"StatefulSet", "db", "secret", "x"}); !apierrors.IsForbidden(err) {
		t.Errorf("forbidden: %v", err)
	}
	if _, err := getWorkloadReplicas(t.Context(), srv.Client(), srv.URL, workload{"ReplicaSet", "default", "gone", "x"}); !apierrors.IsNotFound(err) {
		t.Errorf("not found: %v", err)
	}
}

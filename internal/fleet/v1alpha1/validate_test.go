package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func valid() *FlexNodeRollout {
	mu := intstr.FromInt32(2)
	return &FlexNodeRollout{Spec: RolloutSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "edge"}},
		Release:      Release{KubernetesVersion: "v1.35.4", WorkerImage: "registry.example/worker:1.35@" + digest},
		Strategy:     Strategy{MaxUnavailable: &mu, Soak: &metav1.Duration{Duration: time.Minute}},
	}}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *FlexNodeRollout)
		want   string // the field path of the one error; "" for none
	}{
		{"valid", func(*FlexNodeRollout) {}, ""},
		{"digest without tag", func(r *FlexNodeRollout) { r.Spec.Release.WorkerImage = "localhost:5000/w@" + digest }, ""},
		{"tag only", func(r *FlexNodeRollout) { r.Spec.Release.WorkerImage = "registry.example/worker:1.35" }, "spec.release.workerImage"},
		{"short digest", func(r *FlexNodeRollout) { r.Spec.Release.WorkerImage = "registry.example/worker@sha256:abc" }, "spec.release.workerImage"},
		{"upper-case digest", func(r *FlexNodeRollout) {
			r.Spec.Release.WorkerImage = "registry.example/worker@" + strings.ToUpper(digest)
		}, "spec.release.workerImage"},
		{"no selector", func(r *FlexNodeRollout) { r.Spec.NodeSelector = nil }, "spec.nodeSelector"},
		{"bad selector", func(r *FlexNodeRollout) {
			r.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, "spec.nodeSelector"},
		{"empty release", func(r *FlexNodeRollout) { r.Spec.Release = Release{} }, "spec.release"},
		{"version without v", func(r *FlexNodeRollout) { r.Spec.Release.KubernetesVersion = "1.35.4" }, "spec.release.kubernetesVersion"},
		{"artifacts over http", func(r *FlexNodeRollout) { r.Spec.Release.Artifacts = "http://x/b.tar" }, "spec.release.artifacts"},
		{"agent over http", func(r *FlexNodeRollout) {
			r.Spec.Release.Agent = &AgentRelease{URL: "http://x/a", SHA256: strings.Repeat("a", 64)}
		}, "spec.release.agent.url"},
		{"agent without sha", func(r *FlexNodeRollout) { r.Spec.Release.Agent = &AgentRelease{URL: "https://x/a"} }, "spec.release.agent.sha256"},
		{"maxUnavailable 0", func(r *FlexNodeRollout) { mu := intstr.FromInt32(0); r.Spec.Strategy.MaxUnavailable = &mu }, "spec.strategy.maxUnavailable"},
		{"maxUnavailable 0%", func(r *FlexNodeRollout) { mu := intstr.FromString("0%"); r.Spec.Strategy.MaxUnavailable = &mu }, "spec.strategy.maxUnavailable"},
		{"maxUnavailable 101%", func(r *FlexNodeRollout) { mu := intstr.FromString("101%"); r.Spec.Strategy.MaxUnavailable = &mu }, "spec.strategy.maxUnavailable"},
		{"maxUnavailable 25%", func(r *FlexNodeRollout) { mu := intstr.FromString("25%"); r.Spec.Strategy.MaxUnavailable = &mu }, ""},
		{"negative soak", func(r *FlexNodeRollout) { r.Spec.Strategy.Soak = &metav1.Duration{Duration: -time.Second} }, "spec.strategy.soak"},
		{"zero drain timeout", func(r *FlexNodeRollout) { r.Spec.Strategy.DrainTimeout = &metav1.Duration{} }, "spec.strategy.drainTimeout"},
		{"unknown onFailure", func(r *FlexNodeRollout) { r.Spec.Strategy.OnFailure = "Ignore" }, "spec.strategy.onFailure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := valid()
			tc.change(r)
			errs := Validate(r)
			switch {
			case tc.want == "" && len(errs) != 0:
				t.Fatalf("want no error, got %v", errs)
			case tc.want != "" && (len(errs) != 1 || errs[0].Field != tc.want):
				t.Fatalf("want one error at %s, got %v", tc.want, errs)
			case tc.want != "" && !strings.HasPrefix(errs.ToAggregate().Error(), tc.want+":"):
				t.Fatalf("error %q does not start with its path", errs.ToAggregate())
			}
		})
	}
}

func TestResolveMaxUnavailable(t *testing.T) {
	for _, tc := range []struct {
		mu       *intstr.IntOrString
		selected int
		want     int
	}{
		{nil, 10, 1},
		{ptr(intstr.FromInt32(3)), 10, 3},
		{ptr(intstr.FromInt32(3)), 2, 3}, // more slots than nodes is harmless
		{ptr(intstr.FromString("10%")), 1000, 100},
		{ptr(intstr.FromString("10%")), 15, 2}, // rounded up
		{ptr(intstr.FromString("1%")), 3, 1},
		{ptr(intstr.FromString("50%")), 0, 1}, // never below one
		{ptr(intstr.FromString("100%")), 7, 7},
	} {
		got, err := ResolveMaxUnavailable(tc.mu, tc.selected)
		if err != nil || got != tc.want {
			t.Errorf("ResolveMaxUnavailable(%v, %d) = %d, %v; want %d", tc.mu, tc.selected, got, err, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

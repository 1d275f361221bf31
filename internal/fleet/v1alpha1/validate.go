package v1alpha1

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The same rules as the schema's patterns (types.go markers), so that a
// rollout read from a server that was given an older CRD, or built in Go,
// is held to them too. Compiled on first use, not at init: the binary is
// also the kubelet's credential plugin and must start fast.
var (
	kubeVersionRE = lazyRE(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	artifactsRE   = lazyRE(`^(oci|https)://[^\s]+$`)
	workerImageRE = lazyRE(`^[a-z0-9]([a-z0-9._:/-]*[a-z0-9])?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[a-f0-9]{64}$`)
	agentURLRE    = lazyRE(`^https://[^\s]+$`)
	sha256RE      = lazyRE(`^[a-f0-9]{64}$`)
	percentRE     = lazyRE(`^([1-9][0-9]?|100)%$`)
)

func lazyRE(s string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(s) })
}

// Validate is every rule a rollout must meet, with the field path of each
// violation (spec.release.workerImage: …). Agents validate what they read
// from the cluster before acting on it: cluster data is input, not trusted
// configuration (DESIGN decision 10).
func Validate(r *FlexNodeRollout) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if r.Spec.NodeSelector == nil {
		errs = append(errs, field.Required(spec.Child("nodeSelector"), "select the nodes by label ({} selects every node)"))
	} else if _, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("nodeSelector"), r.Spec.NodeSelector, err.Error()))
	}
	errs = append(errs, validateRelease(&r.Spec.Release, spec.Child("release"))...)
	errs = append(errs, validateStrategy(&r.Spec.Strategy, spec.Child("strategy"))...)
	errs = append(errs, validateRollback(r.Spec.Rollback, spec.Child("rollback"))...) // validate_strategy.go
	return errs
}

func validateRelease(rel *Release, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if *rel == (Release{}) {
		errs = append(errs, field.Required(p, "set at least one of kubernetesVersion, artifacts, workerImage, agent"))
	}
	match := func(name, v string, re func() *regexp.Regexp, what string) {
		if v != "" && !re().MatchString(v) {
			errs = append(errs, field.Invalid(p.Child(name), v, what))
		}
	}
	match("kubernetesVersion", rel.KubernetesVersion, kubeVersionRE, "want vMAJOR.MINOR.PATCH, e.g. v1.35.4")
	match("artifacts", rel.Artifacts, artifactsRE, "want an oci:// or https:// source")
	match("workerImage", rel.WorkerImage, workerImageRE, "want an image pinned by digest: registry/repository[:tag]@sha256:<64 lower-case hex>")
	if rel.Agent != nil {
		ap := p.Child("agent")
		if rel.Agent.URL == "" {
			errs = append(errs, field.Required(ap.Child("url"), "the https URL of the agent binary"))
		} else if !agentURLRE().MatchString(rel.Agent.URL) {
			errs = append(errs, field.Invalid(ap.Child("url"), rel.Agent.URL, "want an https:// URL"))
		}
		if !sha256RE().MatchString(rel.Agent.SHA256) {
			errs = append(errs, field.Invalid(ap.Child("sha256"), rel.Agent.SHA256, "want the binary's SHA-256 as 64 lower-case hex digits"))
		}
	}
	return errs
}

func validateStrategy(s *Strategy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if mu := s.MaxUnavailable; mu != nil {
		if _, err := ResolveMaxUnavailable(mu, 1); err != nil {
			errs = append(errs, field.Invalid(p.Child("maxUnavailable"), mu.String(), err.Error()))
		}
	}
	if s.Soak != nil && s.Soak.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("soak"), s.Soak.Duration.String(), "must not be negative"))
	}
	if s.DrainTimeout != nil && s.DrainTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("drainTimeout"), s.DrainTimeout.Duration.String(), "must be positive"))
	}
	switch s.OnFailure {
	case "", FailurePause, FailureRollback:
	default:
		errs = append(errs, field.NotSupported(p.Child("onFailure"), s.OnFailure, []FailurePolicy{FailurePause, FailureRollback}))
	}
	errs = append(errs, validateStrategyExtras(&s.StrategyExtras, p)...) // validate_strategy.go
	return errs
}

// ResolveMaxUnavailable is the number of slots for selected nodes: a count
// as it is, a percentage of selected rounded up; never below 1 (a rollout
// with no slot could never progress) and nil means the default, 1.
func ResolveMaxUnavailable(mu *intstr.IntOrString, selected int) (int, error) {
	if mu == nil {
		return 1, nil
	}
	if mu.Type == intstr.Int {
		if mu.IntVal < 1 {
			return 0, fmt.Errorf("must be at least 1, not %d", mu.IntVal)
		}
		return int(mu.IntVal), nil
	}
	if !percentRE().MatchString(mu.StrVal) {
		return 0, fmt.Errorf("want a count of at least 1 or a percentage from 1%% to 100%%, not %q", mu.StrVal)
	}
	pct, _ := strconv.Atoi(strings.TrimSuffix(mu.StrVal, "%")) // the pattern made it digits
	n := int(math.Ceil(float64(selected) * float64(pct) / 100))
	return max(n, 1), nil
}

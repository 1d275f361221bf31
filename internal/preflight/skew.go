package preflight

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// NameVersionSkew is `node upgrade`'s own check: the kubelet version the
// repave installs is one the API server supports.
const NameVersionSkew = "version-skew"

// MaxKubeletSkew is how many minor versions a kubelet may be older than
// the API server (Kubernetes' version skew policy since 1.28).
const MaxKubeletSkew = 3

// RepaveNames are the checks RepaveChecks returns, in order: what `node
// upgrade --ignore-preflight-errors` may name.
var RepaveNames = []string{NameCgroups, NameKernelModules, NameDiskSpace, NameStagingSpace, NameArtifactSources, NameWorkerImage, NameVersionSkew}

// RepaveChecks are the checks a repave (and a fleet plan, which stages
// the release on each node) runs before anything changes: the host's
// kernel and cgroups still serve a kubelet, the machines' filesystem has
// room for another side and the bundles dir for the release's bundle,
// the bundle for the new version is there and verifies, the worker image
// resolves and keeps the contract, and the new kubelet is within the
// supported skew of the API server. env.Config is the config the repave
// applies (the new version, the new image); env.ServerVersion asks the
// API server.
func RepaveChecks(env *Env) []Check {
	env.setDefaults()
	return []Check{cgroupsCheck(env), kernelModulesCheck(env), diskSpaceCheck(env), stagingSpaceCheck(env),
		artifactSourcesCheck(env), workerImageCheck(env), versionSkewCheck(env)}
}

// SwitchBackNames are the checks SwitchBackChecks returns.
var SwitchBackNames = []string{NameVersionSkew}

// SwitchBackChecks are the checks a switch back to the retained side
// (issue 30's fleet rollback) runs before anything changes: it fetches
// and unpacks nothing, so only the retained kubelet's skew against the
// API server (which may have moved on since that side served) is left
// to check. env.Config is the retained side's config.
func SwitchBackChecks(env *Env) []Check {
	env.setDefaults()
	return []Check{versionSkewCheck(env)}
}

func versionSkewCheck(e *Env) Check {
	want := e.Config.Components.Kubernetes
	return NewCheck(NameVersionSkew, "components.kubernetes="+want, func(ctx context.Context) Result {
		if e.ServerVersion == nil {
			return Warning("", "API server version not probed")
		}
		server, err := e.ServerVersion(ctx)
		if err != nil {
			return Error("check that the API server is reachable with the node's credential", "cannot read the API server's version: %v", err)
		}
		if err := KubeletSkew(want, server); err != nil {
			return Error("pick a Kubernetes version at most the API server's and at most 3 minor versions older", "%v", err)
		}
		return OK("kubelet %s against API server %s", want, server)
	})
}

// KubeletSkew says whether a kubelet at version kubelet may serve an API
// server at version server: not newer (by minor version, as the skew
// policy counts), and at most MaxKubeletSkew minor versions older.
func KubeletSkew(kubelet, server string) error {
	k, err := version.ParseGeneric(kubelet)
	if err != nil {
		return fmt.Errorf("kubelet version %q: %w", kubelet, err)
	}
	s, err := version.ParseGeneric(server)
	if err != nil {
		return fmt.Errorf("API server version %q: %w", server, err)
	}
	switch {
	case k.Major() != s.Major():
		return fmt.Errorf("kubelet %s and API server %s differ in major version", kubelet, server)
	case k.Minor() > s.Minor():
		return fmt.Errorf("kubelet %s is newer than the API server %s", kubelet, server)
	case s.Minor()-k.Minor() > MaxKubeletSkew:
		return fmt.Errorf("kubelet %s is %d minor versions older than the API server %s (at most %d supported)", kubelet, s.Minor()-k.Minor(), server, MaxKubeletSkew)
	}
	return nil
}

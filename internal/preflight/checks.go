package preflight

// Check names are public: users pass them to --ignore-preflight-errors and
// scripts read them from JSON. Never rename one.
const (
	NameIsPrivilegedUser   = "is-privileged-user"
	NameHostOS             = "host-os"
	NameHostLayout         = "host-layout"
	NameHostPackages       = "host-packages"
	NameSystemd            = "systemd"
	NameCgroups            = "cgroups"
	NameSwap               = "swap"
	NameKernelModules      = "kernel-modules"
	NameKernelLogDevice    = "kernel-log-device"
	NameDiskSpace          = "disk-space"
	NameExistingDeployment = "existing-deployment"
	NameArtifactSources    = "artifact-sources"
	NameWorkerImage        = "worker-image"
	NameAPIServerReachable = "api-server-reachable"
	NameBootstrapToken     = "bootstrap-token"
	NameNodeName           = "node-name"
	// NameIdentity gets a token for the config's Azure identity.
	NameIdentity = "identity"
	// NameClusterAccess asks the API server whether the kubelet's
	// credential may do what the kubelet must.
	NameClusterAccess = "cluster-access"
	// NameProvisioningPayload judges customData/userData (internal/ignition).
	NameProvisioningPayload = "provisioning-payload"
	// NameNetworkingOverlap: the pod and service ranges are not the
	// host's, and the network sysctls can be set.
	NameNetworkingOverlap = "networking-overlap"
	// NameHostRoutes: hostRouting's static routes can be installed.
	NameHostRoutes = "host-routes"
	// NameRouteOverlap: hostRouting.routeOverlap's expected CIDRs route
	// through the default route's interface.
	NameRouteOverlap = "route-overlap"
	// NameAgentBinary is start's own: can install-agent-service, which
	// runs after the join, seed the upgrade slots.
	NameAgentBinary = "agent-binary"
	// NameNodeVersion is start's own too: when the config names another
	// Kubernetes version than the node runs, start repaves, and the new
	// kubelet must be within the API server's version skew.
	NameNodeVersion = "node-version"
)

// DefaultNames are the names of the checks Checks returns, in order. They
// are known without an Env so --ignore-preflight-errors can be validated
// before the config is read.
var DefaultNames = []string{
	NameIsPrivilegedUser,
	NameHostOS,
	NameHostLayout,
	NameHostPackages,
	NameProvisioningPayload,
	NameSystemd,
	NameCgroups,
	NameSwap,
	NameKernelModules,
	NameKernelLogDevice,
	NameDiskSpace,
	NameNetworkingOverlap,
	NamePodCIDR,
	NameHostRoutes,
	NameRouteOverlap,
	NameExistingDeployment,
	NameArtifactSources,
	NameWorkerImage,
	NameAPIServerReachable,
	NameBootstrapToken,
	NameIdentity,
	NameClusterAccess,
	NameNodeName,
}

// StartNames are the names of the checks StartChecks returns, in order:
// what `start --ignore-preflight-errors` may name.
var StartNames = append(append([]string(nil), DefaultNames...), NameAgentBinary, NameNodeVersion)

// explicitIgnoreOnly are checks that `all` in --ignore-preflight-errors
// does not make non-fatal; naming one does. Ignoring one cannot make start
// succeed, only move its failure after the node joined (docs/design.md,
// decision 4: refuse up front, never fail after join), so a blanket `all`
// must not sweep it.
var explicitIgnoreOnly = map[string]bool{NameAgentBinary: true}

// StartChecks are the checks start's preflight phase runs: Checks, then
// start's own (agent-binary, node-version), which ask about this install
// of the agent and the node it runs rather than whether the host can take
// a node, and so are not part of `preflight`, which runs before the agent
// is installed too.
func StartChecks(env *Env) []Check {
	return append(Checks(env), agentBinaryCheck(env), nodeVersionCheck(env))
}

// Checks returns the default checks for env, in DefaultNames order: host
// facts first, then what an earlier install left, then the cluster. env
// must carry a Config; unset fields get their defaults.
func Checks(env *Env) []Check {
	env.setDefaults()
	return []Check{
		privilegedUserCheck(env),
		hostOSCheck(env),
		hostLayoutCheck(env),
		hostPackagesCheck(env),
		provisioningPayloadCheck(env),
		systemdCheck(env),
		cgroupsCheck(env),
		swapCheck(env),
		kernelModulesCheck(env),
		kernelLogDeviceCheck(env),
		diskSpaceCheck(env),
		networkingOverlapCheck(env),
		podCIDRCheck(env),
		hostRoutesCheck(env),
		routeOverlapCheck(env),
		existingDeploymentCheck(env),
		artifactSourcesCheck(env),
		workerImageCheck(env),
		apiServerReachableCheck(env),
		bootstrapTokenCheck(env),
		identityCheck(env),
		clusterAccessCheck(env),
		nodeNameCheck(env),
	}
}

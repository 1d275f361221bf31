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
	NameAPIServerReachable = "api-server-reachable"
	NameBootstrapToken     = "bootstrap-token"
	NameNodeName           = "node-name"
	// NameProvisioningPayload judges customData/userData (internal/ignition).
	NameProvisioningPayload = "provisioning-payload"
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
	NameExistingDeployment,
	NameArtifactSources,
	NameAPIServerReachable,
	NameBootstrapToken,
	NameNodeName,
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
		existingDeploymentCheck(env),
		artifactSourcesCheck(env),
		apiServerReachableCheck(env),
		bootstrapTokenCheck(env),
		nodeNameCheck(env),
	}
}

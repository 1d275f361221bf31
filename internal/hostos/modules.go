package hostos

// KernelModule is a module the node needs from the host kernel (a
// machine cannot load modules), with the sign /proc shows of it when it is
// built in or loaded under another name, so a probe can tell "available"
// from "missing" without loading anything.
type KernelModule struct {
	Name string
	// FSName is a filesystem /proc/filesystems lists once the module is
	// in the kernel ("" when none).
	FSName string
	// ProcPath is a path under /proc that exists once the module is in
	// the kernel ("" when none).
	ProcPath string
}

// RequiredModules are what the worker needs from the host kernel: overlay
// for containerd's snapshotter, br_netfilter so bridged pod traffic
// passes iptables. Preflight checks them; start loads them and lists them
// in the modules-load.d file.
var RequiredModules = []KernelModule{
	{Name: "overlay", FSName: "overlay"},
	{Name: "br_netfilter", ProcPath: "sys/net/bridge"},
}

// RequiredModuleNames are the names of RequiredModules, in order.
func RequiredModuleNames() []string {
	names := make([]string, len(RequiredModules))
	for i, m := range RequiredModules {
		names[i] = m.Name
	}
	return names
}

package controlplane

// PIDs are the running components' process IDs by name (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler): what a
// benchmark reads the control plane's CPU time from (/proc/<pid>/stat).
func (c *ControlPlane) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range c.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

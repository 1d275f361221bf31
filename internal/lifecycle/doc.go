// Package lifecycle owns `start`, which joins this host to the cluster,
// and `reset`, which undoes exactly what start created, as lists of named
// phases of small idempotent tasks (task.Phase). It composes; the work
// itself belongs to the packages the tasks call (artifact, machine, node,
// agentupgrade, state).
//
// Each task is one file here: an unexported struct, an exported
// constructor that returns it as a task.Task, and a kebab-case name that
// is also its log line (`task=<name> status=ok changed=<bool>`). Tasks
// hand each other typed results through task.Output values passed to
// their constructors, so the order they depend on is written in Phases:
//
//	preflight  the checks (preflight.StartChecks); refuses before any change
//	stage      stage-node-components        → Output[artifact.Staged]
//	host       create-layout-dirs, load-kernel-modules, apply-sysctls, disable-swap,
//	           record-host-network, apply-host-routes
//	machine    provision-machine,
//	           install-node-components      Staged → Output[bool] (components changed)
//	           write-nspawn-files,
//	           write-node-config            → Output[bool] (config changed)
//	           start-machine                both bools: restart the node in a running machine
//	           import-images
//	join       wait-tls-bootstrap, write-pod-network, wait-node-ready
//	finish     save-state, install-agent-service, write-joined-marker
//
// Reset is agent (remove-agent-service), machines (remove-machine-kube1,
// remove-machine-kube2, remove-layer-cache), network (remove-host-routes,
// remove-bridge-network) and files (remove-tracked-paths).
//
// A second start on a converged host changes nothing and says so.
package lifecycle

// Package lifecycle owns `start`, which joins this host to the cluster,
// `reset`, which undoes exactly what start created, and the repave
// (`node upgrade`, and start on a config that names another version or
// worker image), as lists of named phases of small idempotent tasks
// (task.Phase). It composes; the work itself belongs to the packages the
// tasks call (artifact, machine, node, agentupgrade, state).
//
// Each task is one file here: an unexported struct, an exported
// constructor that returns it as a task.Task, and a kebab-case name that
// is also its log line (`task=<name> status=ok changed=<bool>`). Tasks
// hand each other typed results through task.Output values passed to
// their constructors, so the order they depend on is written in the phase
// lists: Start.Phases, ResetPhases, Repave.Phases and
// Repave.RollbackPhase. Those lists are the only copy: `start --help`
// prints them (DescribeStart, DescribeRepave) and docs/reference/phases.md
// is generated from them (internal/refdocs, `make docs`).
//
// A second start on a converged host changes nothing and says so.
package lifecycle

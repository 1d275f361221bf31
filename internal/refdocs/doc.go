// Package refdocs owns the reference pages the code can write itself:
// docs/reference/commands.md from the cobra tree, config.md from the
// config schema, its defaults and the upstream key table, phases.md from
// the lifecycle's task.Phase lists, preflight.md from the preflight
// check lists, and layout.md from the layout package. A test regenerates them and fails when the committed pages
// differ, so the manual cannot drift from the binary; `make docs` (or
// `go run ./internal/refdocs/cmd`) rewrites them. It also checks that every
// relative link in README.md and docs/ resolves.
//
// What the code cannot say (what a config key's rule means to a user, what
// a preflight check looks at) lives in small notes files embedded here,
// keyed by the code's own names; the tests fail when a note names
// something the code does not have, or the code has something with no
// note.
package refdocs

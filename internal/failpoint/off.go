//go:build !failpoints

package failpoint

// Enabled reports whether this build acts on failpoints.
const Enabled = false

// Hit is a no-op in product builds: no step is ever skipped.
func Hit(string) bool { return false }

// Package buildinfo owns the version, commit and build time stamped into the
// binary by the Makefile through -ldflags -X.
package buildinfo

// Set by -ldflags "-X github.com/Azure/aks-flex-node/internal/buildinfo.Version=...".
var (
	Version   = "v0.0.0-dev"
	GitCommit = "unknown"
	BuildTime = "unknown"
)

// Info is the JSON shape of `aks-flex-node version --output json`; the
// upgrade path test-runs candidates and reads this, so it is an interface.
type Info struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit"`
	BuildTime string `json:"buildTime"`
}

// Get returns the stamped build information.
func Get() Info { return Info{Version: Version, GitCommit: GitCommit, BuildTime: BuildTime} }

// UserAgent is what the agent calls itself on every request it sends to a
// Kubernetes API server, "aks-flex-node/<version>": the server's audit
// log and metrics then tell the agent's calls from the kubelet's, and one
// version's from another's during an upgrade.
func UserAgent() string { return "aks-flex-node/" + Version }

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

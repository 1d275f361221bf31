// Package failpoint lets test builds stop the agent at a named step, so the
// crash-consistency tests can kill -9 (or freeze, for a power cut) the
// upgrade at every step the code has. Product builds compile Hit to nothing:
// the implementation that acts lives behind the "failpoints" build tag.
//
// In a failpoints build the points come from AKS_FLEX_NODE_FAILPOINTS
// ("step:action[,step:action]") and from a list baked in with
// -ldflags "-X github.com/Azure/aks-flex-node/internal/failpoint.baked=step:action",
// which is how the honest bad test agents (one whose agent exits 1, one that
// never confirms) are built. Actions:
//
//	kill   SIGKILL this process (a crash with no cleanup)
//	exit1  exit with status 1
//	hang   block forever (the process is alive but makes no progress)
//	skip   Hit returns true and the caller leaves the step out
//
// With AKS_FLEX_NODE_FAILPOINT_DIR set, each point fires at most once
// (a marker file in that dir records it) and a "<step>.reached" file is
// written before acting, so a test can wait for the step and then cut power.
package failpoint

// EnvPoints and EnvDir are read by failpoints builds only.
const (
	EnvPoints = "AKS_FLEX_NODE_FAILPOINTS"
	EnvDir    = "AKS_FLEX_NODE_FAILPOINT_DIR"
)

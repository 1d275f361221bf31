package kubeclient

import (
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

// Policy is how long one request of one kind of caller may take, dial to
// last byte (rest.Config.Timeout; a Get or Patch also sends it to the
// server as ?timeout=). Callers pick a named policy: the bound says what
// the caller can afford to wait, not how fast the server usually is.
type Policy struct {
	Timeout time.Duration
}

var (
	// EventWrite is one Event written on the Node. Events are best
	// effort and recorded on the way through an action (a repair, a
	// reset): a slow server must not hold the action up longer than this.
	EventWrite = Policy{Timeout: 5 * time.Second}
	// Step is a task of start or reset that reads or patches the Node
	// (its Ready condition, its pod CIDR, cordon and the stopped mark):
	// the task retries, or gives up and says so, well inside start's
	// join timeout.
	Step = Policy{Timeout: 10 * time.Second}
	// Repave is a repave's calls (cordon, drain, wait for the new side's
	// kubelet, uncordon, the Events on the way). Its drain lists every
	// Pod on the Node and evicts each, where the server also consults
	// disruption budgets: slower than a Step's calls, and a repave has
	// minutes for its drain.
	Repave = Policy{Timeout: 15 * time.Second}
	// AgentLoop is the agent's loops: the List of every Node the pod
	// routes are built from (large in a large cluster), the Node it
	// keeps, the repave it finishes. A loop that waits longer only
	// delays its next pass; one that gives up early retries a whole list.
	AgentLoop = Policy{Timeout: 30 * time.Second}
	// Follow is an informer's list and watch (the agent's keep-pod-routes
	// cache of the Nodes): a watch is meant to stay open for minutes, the
	// server ending it at its timeoutSeconds, so no bound covers every
	// request of the client (rest.Config.Timeout would cut each watch
	// and make the agent open one twice a minute). The caller bounds
	// each request instead: a list by its context, a watch by its
	// TimeoutSeconds (the server's bound) and its context (the client's).
	Follow = Policy{Timeout: 0}
)

// New is the node's client for the server and credential c names (see
// node.ClientConfig), each request bounded by p and sent as
// buildinfo.UserAgent. It is the one way the product makes the node's
// client; HTTPClient is the same client for raw calls.
func New(c *rest.Config, p Policy) (Interface, error) {
	return newForConfig(configFor(c, p))
}

// HTTPClient is New as a plain HTTP client (same credential, timeout and
// user agent), for a caller that sends its own requests and reads raw
// answers: `debug`'s API probe.
func HTTPClient(c *rest.Config, p Policy) (*http.Client, error) {
	cfg := configFor(c, p)
	return rest.HTTPClientFor(&cfg)
}

// configFor is c with p's timeout and the product's user agent; c itself
// is not changed.
func configFor(c *rest.Config, p Policy) rest.Config {
	cfg := *c
	cfg.Timeout = p.Timeout
	cfg.UserAgent = buildinfo.UserAgent()
	return cfg
}

package kubeclient

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

// Policy is how long one request of one kind of caller may take, dial to
// last byte (rest.Config.Timeout; a Get or Patch also sends it to the
// server as ?timeout=), and how fast that kind of caller may send them
// (a token bucket of QPS requests a second, Burst at once). Callers pick
// a named policy: the bound says what the caller can afford to wait, not
// how fast the server usually is.
//
// The rates are chosen for a fleet: an agent at rest sends almost
// nothing (its Node informer is one open watch; see
// docs/reference/fleet-scale.md), so a bucket is only ever drained by a burst of work
// (a drain, a storm of repairs, a relist after an outage) and the rate
// is what that burst costs the API server, multiplied by the hosts that
// burst at once. A named policy's bucket is shared by every client of
// the process made with it (New is called per request batch, and a
// bucket per client would bound nothing); a caller that sets
// rest.Config.RateLimiter itself (the fleet simulator, one per
// simulated node) keeps its own.
type Policy struct {
	Timeout time.Duration
	// QPS and Burst: 0 is client-go's default (5 and 10) for a policy
	// without a name, which then has no shared bucket.
	QPS   float32
	Burst int
	// Protobuf asks for answers in protobuf (JSON still accepted): a
	// list or watch of Nodes is their largest traffic, and protobuf is
	// about half JSON's bytes and several times cheaper to encode on the
	// server and decode on the node.
	Protobuf bool
	// name keys the process's shared bucket of a named policy.
	name string
}

var (
	// EventWrite is one Event written on the Node. Events are best
	// effort and recorded on the way through an action (a repair, a
	// reset): a slow server must not hold the action up longer than this.
	// One a second (five at once) bounds an Event storm: Events are the
	// classic way a fleet floods its API server.
	EventWrite = Policy{Timeout: 5 * time.Second, QPS: 1, Burst: 5, name: "event-write"}
	// Step is a task of start or reset that reads or patches the Node
	// (its Ready condition, its pod CIDR, cordon and the stopped mark):
	// the task retries, or gives up and says so, well inside start's
	// join timeout.
	// client-go's default rate: start runs once per host.
	Step = Policy{Timeout: 10 * time.Second, QPS: 5, Burst: 10, name: "step"}
	// Repave is a repave's calls (cordon, drain, wait for the new side's
	// kubelet, uncordon, the Events on the way). Its drain lists every
	// Pod on the Node and evicts each, where the server also consults
	// disruption budgets: slower than a Step's calls, and a repave has
	// minutes for its drain.
	// Five a second evicts a hundred pods in twenty seconds; a rollout
	// bounds how many nodes drain at once (maxUnavailable).
	Repave = Policy{Timeout: 15 * time.Second, QPS: 5, Burst: 20, name: "repave"}
	// AgentLoop is the agent's loops: the List of every Node the pod
	// routes are built from (large in a large cluster), the Node it
	// keeps, the repave it finishes. A loop that waits longer only
	// delays its next pass; one that gives up early retries a whole list.
	// Two a second: a loop's pass sends a handful of requests at most.
	AgentLoop = Policy{Timeout: 30 * time.Second, QPS: 2, Burst: 10, name: "agent-loop"}
	// Follow is an informer's list and watch (the agent's keep-pod-routes
	// cache of the Nodes): a watch is meant to stay open for minutes, the
	// server ending it at its timeoutSeconds, so no bound covers every
	// request of the client (rest.Config.Timeout would cut each watch
	// and make the agent open one twice a minute). The caller bounds
	// each request instead: a list by its context, a watch by its
	// TimeoutSeconds (the server's bound) and its context (the client's).
	// One a second (five at once): an informer sends a list and a watch
	// and, after that, a watch every few minutes; more is a reconnect
	// storm, which the reflector's own backoff spreads further.
	Follow = Policy{Timeout: 0, QPS: 1, Burst: 5, Protobuf: true, name: "follow"}
)

var (
	bucketsMu sync.Mutex
	buckets   = map[string]flowcontrol.RateLimiter{}
)

// bucket is the process's token bucket of named policy p; nil for a
// policy without a name.
func bucket(p Policy) flowcontrol.RateLimiter {
	if p.name == "" || p.QPS <= 0 {
		return nil
	}
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	b, ok := buckets[p.name]
	if !ok {
		b = flowcontrol.NewTokenBucketRateLimiter(p.QPS, p.Burst)
		buckets[p.name] = b
	}
	return b
}

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

// configFor is c with p's timeout and rate and the product's user agent;
// c itself is not changed.
func configFor(c *rest.Config, p Policy) rest.Config {
	cfg := *c
	cfg.Timeout = p.Timeout
	cfg.UserAgent = buildinfo.UserAgent()
	cfg.QPS, cfg.Burst = p.QPS, p.Burst
	if p.Protobuf {
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if cfg.RateLimiter == nil {
		cfg.RateLimiter = bucket(p)
	}
	return cfg
}

package fleetsim

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// meter counts what the simulated nodes send, in a RoundTripper each
// client is wrapped in: by loop (the kubelet's heartbeat, each agent
// loop), verb and resource, the latency of every request that is not a
// watch, and the Node lists that asked for no resourceVersion (a
// consistent read: a quorum read of etcd unless the server serves it
// from its watch cache after a progress notify) by node.
type meter struct {
	mu        sync.Mutex
	counts    map[string]int64 // "loop verb resource"
	latencies []time.Duration
	nodeLists map[string]int // node -> lists of Nodes without resourceVersion
	allLists  map[string]int // "node loop" -> lists of Nodes, whatever their version
	since     time.Time
}

func newMeter() *meter {
	return &meter{counts: map[string]int64{}, nodeLists: map[string]int{}, allLists: map[string]int{}, since: time.Now()}
}

// reset starts a new window: counts and latencies since now.
func (m *meter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts, m.latencies, m.since = map[string]int64{}, nil, time.Now()
}

// wrap is rest.Config.WrapTransport for node's loop.
func (m *meter) wrap(node, loop string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &counted{inner: rt, do: func(r *http.Request) (*http.Response, error) {
			verb, resource := classify(r)
			began := time.Now()
			resp, err := rt.RoundTrip(r)
			m.mu.Lock()
			m.counts[loop+" "+verb+" "+resource]++
			if verb != "WATCH" {
				m.latencies = append(m.latencies, time.Since(began))
			}
			if verb == "LIST" && resource == "nodes" {
				m.allLists[node+" "+loop]++
				if r.URL.Query().Get("resourceVersion") == "" {
					m.nodeLists[node]++
				}
			}
			m.mu.Unlock()
			return resp, err
		}}
	}
}

// counted is a RoundTripper that counts; it names the one it wraps, so
// client-go can still cancel a request whose timeout passed.
type counted struct {
	inner http.RoundTripper
	do    func(*http.Request) (*http.Response, error)
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) { return c.do(r) }

func (c *counted) WrappedRoundTripper() http.RoundTripper { return c.inner }

// classify is the request's verb as the API server counts it and its
// resource (with the subresource after a slash).
func classify(r *http.Request) (verb, resource string) {
	p := strings.Trim(r.URL.Path, "/")
	segs := strings.Split(p, "/")
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return r.Method, p
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) == 0 {
		return r.Method, p
	}
	resource = segs[0]
	if len(segs) >= 3 {
		resource += "/" + segs[2]
	}
	named := len(segs) >= 2
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true":
			verb = "WATCH"
		case named:
			verb = "GET"
		default:
			verb = "LIST"
		}
	case http.MethodPost:
		verb = "CREATE"
	case http.MethodPut:
		verb = "UPDATE"
	case http.MethodPatch:
		verb = "PATCH"
	case http.MethodDelete:
		verb = "DELETE"
	default:
		verb = r.Method
	}
	return verb, resource
}

// window is what the meter counted since its last reset.
type window struct {
	seconds   float64
	counts    map[string]int64
	latencies []time.Duration
}

func (m *meter) snapshot() window {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[string]int64, len(m.counts))
	for k, v := range m.counts {
		c[k] = v
	}
	return window{seconds: time.Since(m.since).Seconds(), counts: c, latencies: slices.Clone(m.latencies)}
}

// etcdNodeLists is the Node lists without a resourceVersion by node,
// since the fleet started.
func (m *meter) etcdNodeLists() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.nodeLists)
}

// nodeListsBy is every Node list by "node loop", since the fleet started.
func (m *meter) nodeListsBy() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.allLists)
}

// total is the requests of loops matching keep (nil: all).
func (w window) total(keep func(loop string) bool) int64 {
	var n int64
	for k, v := range w.counts {
		if keep == nil || keep(strings.Fields(k)[0]) {
			n += v
		}
	}
	return n
}

// percentile is the p-th percentile (0-100) of the latencies.
func (w window) percentile(p float64) time.Duration {
	if len(w.latencies) == 0 {
		return 0
	}
	s := slices.Clone(w.latencies)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

// table is the counts as rate lines, "loop verb resource: N (x/s)".
func (w window) table() []string {
	keys := make([]string, 0, len(w.counts))
	for k := range w.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s: %d (%.2f/s)", k, w.counts[k], float64(w.counts[k])/w.seconds))
	}
	return out
}

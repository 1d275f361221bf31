package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

// agentServer answers every path with a Node, a NodeList or a version and
// records the User-Agent and ?timeout= of each request.
type agentServer struct {
	mu   sync.Mutex
	seen []string
}

func (a *agentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, fmt.Sprintf("%s %s ua=%q timeout=%s", r.Method, r.URL.Path, r.UserAgent(), r.URL.Query().Get("timeout")))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/version":
		fmt.Fprint(w, `{"major":"1","minor":"35","gitVersion":"v1.35.4"}`)
	case "/api/v1/nodes":
		fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}`)
	default:
		fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}`)
	}
}

// TestUserAgentAndPolicyOnEveryRequest: whatever policy a caller picks,
// and whatever user agent the rest.Config it hands in carries, every
// request of the typed client and of its raw HTTP form reaches the server
// as aks-flex-node/<version>, bounded by the policy's timeout.
func TestUserAgentAndPolicyOnEveryRequest(t *testing.T) {
	old := buildinfo.Version
	buildinfo.Version = "v1.2.3-test"
	t.Cleanup(func() { buildinfo.Version = old })
	ua := fmt.Sprintf("%q", "aks-flex-node/v1.2.3-test")
	if got := fmt.Sprintf("%q", buildinfo.UserAgent()); got != ua {
		t.Fatalf("buildinfo.UserAgent() = %s, want %s", got, ua)
	}
	for name, p := range map[string]Policy{"EventWrite": EventWrite, "Step": Step, "Repave": Repave, "AgentLoop": AgentLoop} {
		t.Run(name, func(t *testing.T) {
			a := &agentServer{}
			s := httptest.NewServer(a)
			defer s.Close()
			in := &rest.Config{Host: s.URL, UserAgent: "something-else/0"}
			c, err := New(in, p)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Discovery().ServerVersion(); err != nil {
				t.Fatal(err)
			}
			hc, err := HTTPClient(in, p)
			if err != nil {
				t.Fatal(err)
			}
			if hc.Timeout != p.Timeout {
				t.Errorf("HTTPClient timeout %s, want %s", hc.Timeout, p.Timeout)
			}
			resp, err := hc.Get(s.URL + "/api/v1/nodes/n1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if in.UserAgent != "something-else/0" || in.Timeout != 0 {
				t.Errorf("the caller's rest.Config was changed: %+v", in)
			}
			d := p.Timeout.String()
			want := []string{
				"GET /api/v1/nodes/n1 ua=" + ua + " timeout=" + d,
				"GET /api/v1/nodes ua=" + ua + " timeout=", // a list's bound is its own TimeoutSeconds
				"GET /version ua=" + ua + " timeout=" + d,
				"GET /api/v1/nodes/n1 ua=" + ua + " timeout=", // raw: the client's Timeout only
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if fmt.Sprint(a.seen) != fmt.Sprint(want) {
				t.Errorf("requests:\n%q\nwant:\n%q", a.seen, want)
			}
		})
	}
}

// TestPoliciesAreDistinctAndBounded: each named policy bounds its
// requests (a zero timeout would wait forever) and no two share a name
// for the same bound by accident.
func TestPoliciesAreDistinctAndBounded(t *testing.T) {
	seen := map[time.Duration]string{}
	for name, p := range map[string]Policy{"EventWrite": EventWrite, "Step": Step, "Repave": Repave, "AgentLoop": AgentLoop} {
		if p.Timeout <= 0 || p.Timeout > time.Minute {
			t.Errorf("%s: timeout %s, want within (0, 1m]", name, p.Timeout)
		}
		if other, ok := seen[p.Timeout]; ok {
			t.Errorf("%s and %s are the same policy (%s)", name, other, p.Timeout)
		}
		seen[p.Timeout] = name
	}
	// Follow alone leaves the bound to each request: its watches stay
	// open for minutes (the caller bounds every list and watch).
	if Follow.Timeout != 0 {
		t.Errorf("Follow: timeout %s cuts every watch at it", Follow.Timeout)
	}
}

// Every client a named policy makes draws from one bucket of the process
// (the agent makes a client per pass: a bucket each would bound nothing);
// a caller's own limiter (the fleet simulator's, one per simulated node)
// is kept; a policy without a name gets client-go's default per client.
func TestPolicyRateIsSharedPerProcess(t *testing.T) {
	for name, p := range map[string]Policy{"EventWrite": EventWrite, "Step": Step, "Repave": Repave, "AgentLoop": AgentLoop, "Follow": Follow} {
		a, b := configFor(&rest.Config{Host: "https://a"}, p), configFor(&rest.Config{Host: "https://b"}, p)
		if a.RateLimiter == nil || a.RateLimiter != b.RateLimiter {
			t.Errorf("%s: clients of the policy do not share its bucket", name)
		}
		if a.QPS != p.QPS || a.Burst != p.Burst || p.QPS <= 0 || p.Burst < 1 {
			t.Errorf("%s: QPS %v burst %d", name, a.QPS, a.Burst)
		}
	}
	if configFor(&rest.Config{}, AgentLoop).RateLimiter == configFor(&rest.Config{}, Follow).RateLimiter {
		t.Error("two policies share one bucket")
	}
	own := flowcontrol.NewFakeAlwaysRateLimiter()
	if got := configFor(&rest.Config{RateLimiter: own}, AgentLoop).RateLimiter; got != own {
		t.Error("the caller's own limiter was replaced")
	}
	if got := configFor(&rest.Config{}, Policy{Timeout: time.Second}).RateLimiter; got != nil {
		t.Error("a policy without a name got a shared bucket")
	}
}

// Follow's lists and watches ask for protobuf first (JSON still
// accepted); the other policies' for JSON, client-go's default.
func TestFollowAsksForProtobuf(t *testing.T) {
	if got := configFor(&rest.Config{}, Follow).AcceptContentTypes; got != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("Follow accepts %q", got)
	}
	if got := configFor(&rest.Config{}, AgentLoop).AcceptContentTypes; got != "" {
		t.Errorf("AgentLoop accepts %q", got)
	}
}

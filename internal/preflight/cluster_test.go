package preflight

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/clusterprep"
	"github.com/Azure/aks-flex-node/internal/state"
)

// fakeAPIServer answers like kube-apiserver for the three requests
// preflight makes. Tests only ever talk to it on loopback.
type fakeAPIServer struct {
	*httptest.Server
	mu       sync.Mutex
	review   int    // status for SelfSubjectReview
	username string // username it reports
	node     int    // status for GET node
	all      int    // when set, the status for every request
	// bearer is the credential it authenticates (default testToken);
	// denied are the permissions (Permission.String()) it refuses.
	bearer string
	denied map[string]bool
	seen   []string
	// nodeList answers GET /api/v1/nodes (404 when empty); listCode is
	// its status (default 200).
	nodeList string
	listCode int
}

// set changes the server's behaviour between requests.
func (f *fakeAPIServer) set(change func(f *fakeAPIServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{review: http.StatusCreated, username: "system:bootstrap:abcdef", node: http.StatusNotFound}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	// The wrong-CA cases make the client abort handshakes; that is the point.
	f.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	auth := r.Header.Get("Authorization")
	f.seen = append(f.seen, r.Method+" "+r.URL.Path+" "+auth)
	w.Header().Set("Content-Type", "application/json")
	if f.all != 0 {
		w.WriteHeader(f.all)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/version":
		_, _ = io.WriteString(w, `{"major":"1","minor":"35","gitVersion":"v1.35.0"}`)
	case r.Method == http.MethodPost && r.URL.Path == apiprobe.SelfSubjectReviewPath:
		var body struct{ APIVersion, Kind string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Kind != "SelfSubjectReview" || body.APIVersion != "authentication.k8s.io/v1" || auth != "Bearer "+f.credential() {
			http.Error(w, `{"kind":"Status","code":400}`, http.StatusBadRequest)
			return
		}
		if f.review != http.StatusCreated {
			w.WriteHeader(f.review)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
			"status": map[string]any{"userInfo": map[string]any{"username": f.username, "groups": []string{"system:bootstrappers"}}},
		})
	case r.Method == http.MethodPost && r.URL.Path == apiprobe.SelfSubjectAccessReviewPath:
		var body struct {
			Kind string
			Spec struct {
				ResourceAttributes apiprobe.ResourceAttributes `json:"resourceAttributes"`
			}
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Kind != "SelfSubjectAccessReview" || auth != "Bearer "+f.credential() {
			http.Error(w, `{"kind":"Status","code":400}`, http.StatusBadRequest)
			return
		}
		a := body.Spec.ResourceAttributes
		p := clusterprep.Permission{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"allowed": !f.denied[p.String()]}})
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && (f.nodeList != "" || f.listCode != 0):
		if f.listCode != 0 {
			w.WriteHeader(f.listCode)
		}
		_, _ = io.WriteString(w, f.nodeList)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/"+testNode:
		w.WriteHeader(f.node)
		_, _ = io.WriteString(w, `{"kind":"Node"}`)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeAPIServer) credential() string {
	if f.bearer != "" {
		return f.bearer
	}
	return testToken
}

// hostFor points the fake host's config at the server, trusting caPEM.
func hostFor(t *testing.T, srv *fakeAPIServer, caPEM []byte) *fakeHost {
	h := newHost(t)
	h.set("node.kubelet.clusterFQDN", srv.Listener.Addr().String())
	h.set("node.kubelet.caCertData", caData(caPEM))
	return h
}

func TestAPIServerReachable(t *testing.T) {
	srv := newFakeAPIServer(t)
	h := hostFor(t, srv, certPEM(srv.Certificate()))
	want(t, h.run(NameAPIServerReachable), SeverityOK, srv.URL+"/version", "answered 200", "v1.35.0", "caCertData")

	// Any HTTP answer over verified TLS is reachable.
	srv.set(func(f *fakeAPIServer) { f.all = http.StatusForbidden })
	want(t, h.run(NameAPIServerReachable), SeverityOK, "answered 403")
	srv.set(func(f *fakeAPIServer) { f.all = 0 })

	wrong := hostFor(t, srv, newCA(t).certPEM)
	r := wrong.run(NameAPIServerReachable)
	want(t, r, SeverityError, "CA does not match", srv.URL, "node.kubelet.caCertData", wrong.configFile())

	// Connection refused.
	addr := refusedAddress(t)
	refused := hostFor(t, srv, certPEM(srv.Certificate()))
	refused.set("node.kubelet.clusterFQDN", addr)
	want(t, refused.run(NameAPIServerReachable), SeverityError, "cannot reach the API server at https://"+addr+"/version", "node.kubelet.clusterFQDN")
}

func TestBootstrapToken(t *testing.T) {
	srv := newFakeAPIServer(t)
	h := hostFor(t, srv, certPEM(srv.Certificate()))
	noSecret := func(r Result) {
		t.Helper()
		if strings.Contains(r.Message+r.Remedy, testSecret) {
			t.Errorf("the token secret is in the output: %+v", r)
		}
	}

	r := h.run(NameBootstrapToken)
	want(t, r, SeverityOK, "system:bootstrap:abcdef")
	noSecret(r)

	srv.set(func(f *fakeAPIServer) { f.review = http.StatusUnauthorized })
	r = h.run(NameBootstrapToken)
	want(t, r, SeverityError, "the API server rejected the bootstrap token abcdef", "azure.bootstrapToken.token")
	noSecret(r)

	srv.set(func(f *fakeAPIServer) { f.review = http.StatusForbidden })
	want(t, h.run(NameBootstrapToken), SeverityOK, "403")

	srv.set(func(f *fakeAPIServer) { f.review = http.StatusCreated })
	srv.set(func(f *fakeAPIServer) { f.username = "system:serviceaccount:kube-system:default" })
	r = h.run(NameBootstrapToken)
	want(t, r, SeverityError, `"system:serviceaccount:kube-system:default", not "system:bootstrap:abcdef"`)
	noSecret(r)

	// Unverifiable, not wrong: api-server-reachable reports the cause.
	wrong := hostFor(t, srv, newCA(t).certPEM)
	r = wrong.run(NameBootstrapToken)
	want(t, r, SeverityWarning, "not verified", NameAPIServerReachable)
	noSecret(r)

	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, s := range srv.seen {
		if strings.HasPrefix(s, "POST") && !strings.HasSuffix(s, "Bearer "+testToken) {
			t.Errorf("review sent without the bearer token: %q", s)
		}
	}
}

func TestNodeName(t *testing.T) {
	srv := newFakeAPIServer(t)
	h := hostFor(t, srv, certPEM(srv.Certificate()))
	want(t, h.run(NameNodeName), SeverityOK, testNode, "no Node of that name exists")

	srv.set(func(f *fakeAPIServer) { f.node = http.StatusOK })
	want(t, h.run(NameNodeName), SeverityWarning, "a Node named "+testNode+" already exists", "kubectl delete node "+testNode, "agent.nodeName")

	// This host's own Node (a converging or repaving start) is no
	// takeover; another host's state with that name would not be here.
	env := h.env()
	dir := env.Layout.OnRoot(env.Layout.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: "another-node"}); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameNodeName), SeverityWarning, "a Node named "+testNode+" already exists")
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: testNode}); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameNodeName), SeverityOK, "the Node of that name is this host's: it joined as "+testNode)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	srv.set(func(f *fakeAPIServer) { f.node = http.StatusForbidden })
	want(t, h.run(NameNodeName), SeverityOK, "cannot tell", "403")

	wrong := hostFor(t, srv, newCA(t).certPEM)
	want(t, wrong.run(NameNodeName), SeverityOK, "cannot tell")
}

// With a target cluster the node name is also the AKS Machine's name:
// at most 40 characters, no dots, refused with the key to change.
func TestNodeNameIsAnAKSMachineName(t *testing.T) {
	for _, bad := range []string{"node-1.site.example", strings.Repeat("n", 41)} {
		h := newHost(t)
		h.cfg["agent"] = map[string]any{"nodeName": bad}
		h.cfg["azure"].(map[string]any)["targetCluster"] = map[string]any{"resourceId": "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/c1"}
		want(t, h.run(NameNodeName), SeverityError, "agent.nodeName", bad, "AKS Machine")
	}
	// Without one, a dotted name is a valid Node name.
	h := newHost(t)
	h.cfg["agent"] = map[string]any{"nodeName": "node-1.site.example"}
	want(t, h.run(NameNodeName), SeverityOK, "valid DNS-1123 name")
}

// refusedAddress is a loopback address that refuses connections for as
// long as the test runs: a port bound and never listened on. A port
// picked free and released could be taken by another process meanwhile.
func refusedAddress(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

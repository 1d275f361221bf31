package fleetrollout

import (
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// Where the releases are published, as a site registry would hold them.
const (
	bundleRepo = "aks-flex/bootstrap-artifacts"
	// badRepo holds bundles one host is made to see under bundleRepo's
	// name (siteRegistry.swap): a failure for that host only.
	badRepo    = "aks-flex/bad-artifacts"
	workerRepo = "aks-flex/worker"
)

// siteRegistry is go-containerregistry's registry (pkg/registry), one
// in-memory store served on this machine's loopback (Outer, where the
// test pushes) and, at one port, on the loopback of each host's network
// namespace (127.0.0.1:Port), so that every host's config and every
// rollout name the same oci://127.0.0.1:Port/... as a registry on the
// site would be. Each host's listener goes through its own view: the
// test can make one host see other bundles, or hold its bundle requests.
type siteRegistry struct {
	Outer string
	Port  int
	reg   http.Handler
	mu    sync.Mutex
	views map[string]*view // by host namespace path
}

// view is what one host sees of the registry.
type view struct {
	// swap maps a manifest ("repo:tag" or "repo:sha256:...") to the one
	// this host is served in its place: a failure for one host only.
	swap map[string]string
	// hold, when set, holds this host's bundle manifest requests until it
	// is closed (bounded by holdMax).
	hold chan struct{}
	// served counts what this host was sent (waves_registry_test.go).
	served servedBytes
}

// holdMax bounds a held request, well within the agent's 60 s wait for
// response headers: a hold orders the hosts, it never fails a fetch.
const holdMax = 30 * time.Second

func startRegistry(t *testing.T, namespaces []string) *siteRegistry {
	t.Helper()
	r := &siteRegistry{reg: registry.New(registry.Logger(log.New(io.Discard, "", 0))), views: map[string]*view{}}
	outer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Outer = outer.Addr().String()
	var servers []*http.Server
	serve := func(l net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go srv.Serve(l) //nolint:errcheck // ends with Close
	}
	serve(outer, r.reg)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Close()
		}
	})
	addr := "127.0.0.1:0"
	for _, ns := range namespaces {
		l, err := aclhost.ListenInNetNS(ns, addr)
		if err != nil {
			t.Fatalf("registry listener in %s: %v", ns, err)
		}
		if r.Port == 0 {
			// Every namespace is the test's own and fresh: the first
			// free port is free in the others too.
			r.Port = l.Addr().(*net.TCPAddr).Port
			addr = "127.0.0.1:" + strconv.Itoa(r.Port)
		}
		r.views[ns] = &view{}
		serve(l, r.hostHandler(ns))
	}
	return r
}

// Inner is the registry as every host names it.
func (r *siteRegistry) Inner() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

func (r *siteRegistry) hostHandler(ns string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w = r.counted(ns, w, req)
		repo, ref, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/")
		if !ok {
			r.reg.ServeHTTP(w, req) // blobs are by digest, the same for every view
			return
		}
		r.mu.Lock()
		v := r.views[ns]
		hold, swapped := v.hold, v.swap[repo+":"+ref]
		r.mu.Unlock()
		if hold != nil && repo == bundleRepo {
			select {
			case <-hold:
			case <-time.After(holdMax):
			case <-req.Context().Done():
				return
			}
		}
		if swapped != "" {
			repo, ref, _ = strings.Cut(swapped, ":")
			req = req.Clone(req.Context())
			req.URL.Path = "/v2/" + repo + "/manifests/" + ref
		}
		r.reg.ServeHTTP(w, req)
	})
}

// swap makes the host on ns get manifest to instead of from (each
// "repo:ref"); an empty to restores from.
func (r *siteRegistry) swap(ns, from, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.views[ns]
	if v.swap == nil {
		v.swap = map[string]string{}
	}
	if to == "" {
		delete(v.swap, from)
		return
	}
	v.swap[from] = to
}

// holdBundles holds the bundle manifest requests of the hosts on
// namespaces until the returned release runs (or holdMax passes for a
// request).
func (r *siteRegistry) holdBundles(namespaces ...string) (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	for _, ns := range namespaces {
		r.views[ns].hold = ch
	}
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			for _, ns := range namespaces {
				r.views[ns].hold = nil
			}
			r.mu.Unlock()
			close(ch)
		})
	}
}

package machineapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

const testEndpoint = "/api/v1/namespaces/aks-flex-system/services/http:aks-flex-controller:80/proxy"

// apiServer stands in for the API server's proxy path in unit tests
// (test/e2e/join's TestMachineInCluster runs the real one): answer
// gives each request's status and body.
type apiServer struct {
	mu     sync.Mutex
	seen   []string
	bodies []string
	answer func(r *http.Request) (int, string)
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("If-None-Match")+r.Header.Get("If-Match"))
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	code, body := s.answer(r)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

func inClusterEnv(t *testing.T, answer func(r *http.Request) (int, string)) (*InCluster, *apiServer) {
	s := &apiServer{answer: answer}
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	c, err := NewInCluster(InClusterOptions{Server: srv.URL, HTTPClient: srv.Client(), Endpoint: testEndpoint, Name: "edge-01"})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

const machinePath = testEndpoint + "/machines/edge-01"

func TestInClusterRegisterCreatesThenAdopts(t *testing.T) {
	var stored string
	c, s := inClusterEnv(t, func(r *http.Request) (int, string) {
		switch {
		case r.Method == http.MethodGet && stored == "":
			return 404, `{"error":{"code":"NotFound","message":"Machine edge-01 not found."}}`
		case r.Method == http.MethodGet:
			return 200, stored
		case r.Method == http.MethodPut:
			stored = `{"name":"edge-01","properties":{"eTag":"e1","provisioningState":"Succeeded","kubernetes":{"orchestratorVersion":"1.35.0"}}}`
			return 201, stored
		}
		return 405, ``
	})
	reg, err := Register(context.Background(), c, Want{Version: "1.35.0", MaxPods: 110})
	if err != nil || reg.Outcome != Created || reg.ETag != "e1" {
		t.Fatalf("%+v %v", reg, err)
	}
	reg, err = Register(context.Background(), c, Want{Version: "1.35.0"})
	if err != nil || reg.Outcome != Adopted {
		t.Fatalf("again: %+v %v", reg, err)
	}
	want := []string{"GET " + machinePath + " ", "PUT " + machinePath + " *", "GET " + machinePath + " "}
	if strings.Join(s.seen, "|") != strings.Join(want, "|") {
		t.Errorf("requests %q, want %q", s.seen, want)
	}
	var put Machine
	if err := json.Unmarshal([]byte(s.bodies[1]), &put); err != nil || put.Version() != "1.35.0" || *put.Properties.Kubernetes.MaxPods != 110 {
		t.Errorf("PUT body %s", s.bodies[1])
	}
	if c.Describe() != machinePath {
		t.Errorf("Describe() = %s", c.Describe())
	}
}

func TestInClusterPutRefusedAdoptsTheControllersMachine(t *testing.T) {
	for _, code := range []int{403, 405, 204} {
		made := false
		c, _ := inClusterEnv(t, func(r *http.Request) (int, string) {
			if r.Method == http.MethodPut {
				made = true
				return code, `{"kind":"Status","reason":"Forbidden","message":"no"}`
			}
			if !made {
				return 404, `{"error":{"code":"NotFound"}}`
			}
			return 200, `{"properties":{"eTag":"pre","kubernetes":{"orchestratorVersion":"1.35.0"}}}`
		})
		m, err := c.Put(context.Background(), Want{Version: "1.35.0"}.machine(), Precondition{IfNoneMatch: true})
		if err != nil || m.ETag() != "pre" {
			t.Errorf("PUT answered %d: %v %v; want the controller's Machine", code, m, err)
		}
	}
}

func TestInClusterAPIServer404IsAnErrorNotNoMachine(t *testing.T) {
	c, _ := inClusterEnv(t, func(*http.Request) (int, string) {
		return 404, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"services \"aks-flex-controller\" not found","reason":"NotFound","code":404}`
	})
	m, err := c.Get(context.Background())
	if err == nil || m != nil || !strings.Contains(err.Error(), machinePath) || !strings.Contains(err.Error(), `services "aks-flex-controller" not found`) {
		t.Errorf("GET: %v %v", m, err)
	}
	// The endpoint's own 404 (ARM's envelope) is no Machine.
	c, _ = inClusterEnv(t, func(*http.Request) (int, string) { return 404, `{"error":{"code":"NotFound"}}` })
	if m, err := c.Get(context.Background()); err != nil || m != nil {
		t.Errorf("the endpoint's 404: %v %v", m, err)
	}
}

func TestInClusterPatchStatus(t *testing.T) {
	c, s := inClusterEnv(t, func(r *http.Request) (int, string) {
		if r.Method == http.MethodPatch && r.Header.Get("Content-Type") == "application/json" {
			return 200, `{}`
		}
		return 400, `{"error":{"code":"BadRequest"}}`
	})
	st := Status{ProvisioningState: "Succeeded", ObservedSettingsVersion: "e1", Message: "applied"}
	if err := c.PatchStatus(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	if s.seen[0] != "PATCH "+machinePath+"/status " || s.bodies[0] != `{"properties":{"status":{"provisioningState":"Succeeded","observedSettingsVersion":"e1","message":"applied"}}}` {
		t.Errorf("%q %q", s.seen, s.bodies)
	}
}

func TestNewInClusterRefusesWhatIsNotAnAPIPath(t *testing.T) {
	for _, ep := range []string{"https://proxy.example.test/x", "relative/path", ""} {
		if _, err := NewInCluster(InClusterOptions{Server: "https://10.0.0.1:6443", HTTPClient: http.DefaultClient, Endpoint: ep, Name: "n"}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	if _, err := NewInCluster(InClusterOptions{Server: "http://10.0.0.1", HTTPClient: http.DefaultClient, Endpoint: testEndpoint, Name: "n"}); err == nil {
		t.Error("a plain-HTTP API server accepted")
	}
}

func TestDescribeFromConfig(t *testing.T) {
	c := &config.Config{}
	c.Agent.NodeName = "edge-01"
	if _, ok, _ := DescribeFromConfig(c); ok {
		t.Error("a config without a Machine has one")
	}
	c.Agent.MachineClient = &config.MachineClient{Mode: config.MachineClientInCluster}
	if d, ok, err := DescribeFromConfig(c); !ok || err != nil || d != config.DefaultInClusterEndpointURL+"/machines/edge-01" {
		t.Errorf("%s %v %v", d, ok, err)
	}
	c.Agent.NodeName = "edge.01"
	if _, _, err := DescribeFromConfig(c); err == nil {
		t.Error("a node name with a dot accepted")
	}
	if _, err := InClusterAtStart(c); err == nil || !strings.Contains(err.Error(), "azure.bootstrapToken") {
		t.Errorf("no bootstrap token: %v", err)
	}
}

// Package fakearm is Azure Resource Manager as far as the node's AKS
// Machine needs it, speaking the documented wire protocol over TLS with
// its own CA: the machine API's paths under
// /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{c}/agentPools/{p}/machines
// at the api-versions it is given; PUT with If-None-Match / If-Match
// answered with the Azure-AsyncOperation pattern (201/200 with a
// non-terminal provisioningState, an operation status URL and
// Retry-After); paged lists with nextLink; bearer tokens checked against
// the fake Entra tenant (test/fakeentra, whose tokens IMDS and the Arc
// agent hand out too); the pool's deleteMachines and listBootstrapData
// actions; ARM's error
// envelope; and fault knobs (any status
// with a code, Retry-After, slow answers, failed operations, an eTag that
// moves between a GET and a PUT). Tests serve it only on loopback.
package fakearm

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Verifier checks a bearer token for an audience (fakeentra.Tenant).
type Verifier interface {
	Verify(token, audience string) (appID, objectID string, err error)
}

// Options shape a fake.
type Options struct {
	Tokens Verifier
	// Audience is the aud the tokens must carry; "" is the fake's URL.
	Audience string
	// APIVersions are the machine API versions served.
	APIVersions []string
	// PageSize is a list page's length (default 2, so lists page).
	PageSize int
	// Location is the region in operation URLs (default eastus).
	Location string
}

// Kind is what a request asks for, for fault matching.
type Kind string

const (
	KindMachine   Kind = "machine"
	KindList      Kind = "list"
	KindOperation Kind = "operation"
	// KindDeleteMachines is the pool's deleteMachines action.
	KindDeleteMachines Kind = "deleteMachines"
	// KindBootstrapData is the pool's listBootstrapData action.
	KindBootstrapData Kind = "listBootstrapData"
)

// Fault answers matching requests instead of the fake: Method and Kind
// ("" matches any), Status with ARM's error envelope (Code, Message), an
// optional Retry-After, after Delay. Status 0 only delays (a slow
// answer). Times is how many requests it answers (0 means 1).
type Fault struct {
	Method     string
	Kind       Kind
	Status     int
	Code       string
	Message    string
	RetryAfter string
	Delay      time.Duration
	Times      int
}

// Request is one request the fake received.
type Request struct {
	Method, Path, APIVersion, IfMatch, IfNoneMatch, AppID string
	Kind                                                  Kind
	At                                                    time.Time
}

// Failure makes the next operation fail: the operation's error and the
// Machine's status.provisioningError.
type Failure struct {
	Code, Message                     string
	ProvisioningCode, ProvisioningMsg string
	// State is Failed (default) or Canceled.
	State string
}

// Server is one running fake.
type Server struct {
	// URL is https://<addr>, the azure.resourceManagerEndpoint to use.
	URL   string
	CAPEM []byte

	o  Options
	mu sync.Mutex
	// machines by lowercased resource ID.
	machines map[string]*machine
	ops      map[string]*operation
	faults   []*Fault
	requests []Request
	// pollsToComplete is how many status polls an operation answers
	// InProgress before it ends; 0 completes PUTs synchronously.
	pollsToComplete int
	pollRetryAfter  string
	failNext        *Failure
	// bootstrap is each pool's listBootstrapData answer, by lowercased
	// pool resource ID.
	bootstrap   map[string]map[string]any
	moveETag    bool
	keepVersion bool
}

// Start serves a fake on l (a loopback listener) until t ends.
func Start(t testing.TB, l net.Listener, o Options) *Server {
	t.Helper()
	caPEM, cert, err := serving(l.Addr().(*net.TCPAddr).IP)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "https://" + l.Addr().String(), CAPEM: caPEM, o: o,
		machines: map[string]*machine{}, ops: map[string]*operation{}, bootstrap: map[string]map[string]any{}, pollsToComplete: 1, pollRetryAfter: "1"}
	if s.o.Audience == "" {
		s.o.Audience = s.URL + "/"
	}
	if s.o.PageSize <= 0 {
		s.o.PageSize = 2
	}
	if s.o.Location == "" {
		s.o.Location = "eastus"
	}
	srv := &http.Server{Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// Audience is the aud the fake accepts.
func (s *Server) Audience() string { return s.o.Audience }

// Inject queues a fault.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times <= 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// SetPolling sets how many polls an operation takes (0: PUT completes
// at once, with no Azure-AsyncOperation) and the Retry-After its answers
// carry ("" for none).
func (s *Server) SetPolling(polls int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollsToComplete, s.pollRetryAfter = polls, retryAfter
}

// FailNextOperation makes the next PUT's operation end with f.
func (s *Server) FailNextOperation(f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = &f
}

// MoveETagAfterNextGet changes the Machine's eTag right after the next
// GET of it answers, as another writer would between a GET and a PUT.
func (s *Server) MoveETagAfterNextGet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moveETag = true
}

// KeepVersionOnNextPut makes the next PUT keep the Machine's
// orchestratorVersion, as an RP that did not take the change would.
func (s *Server) KeepVersionOnNextPut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keepVersion = true
}

// Requests are the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func newETag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func key(id string) string { return strings.ToLower(id) }

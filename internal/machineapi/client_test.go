package machineapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/test/fakearm"
)

func want135() *Machine {
	return Want{Version: "1.35.0", MaxPods: 110, Labels: map[string]string{"site": "a"}}.machine()
}

func countKind(reqs []fakearm.Request, method string, kind fakearm.Kind) int {
	n := 0
	for _, r := range reqs {
		if r.Method == method && r.Kind == kind {
			n++
		}
	}
	return n
}

func TestGetOfAbsentMachineIsNoMachine(t *testing.T) {
	e := newEnv(t)
	m, err := e.c.Get(context.Background())
	if err != nil || m != nil {
		t.Fatalf("got %v, %v; want no machine and no error", m, err)
	}
	reqs := e.arm.Requests()
	if len(reqs) != 1 || reqs[0].Path != e.id.String() || reqs[0].APIVersion != config.DefaultMachineAPIVersion || reqs[0].AppID != e.appID {
		t.Errorf("requests %+v", reqs)
	}
}

func TestCreateSendsIfNoneMatchAndPollsTheAsyncOperationAtRetryAfter(t *testing.T) {
	e := newEnv(t)
	e.arm.SetPolling(3, "7")
	m, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Properties.ProvisioningState != StateSucceeded || m.Properties.Kubernetes.CurrentOrchestratorVersion != "1.35.0" || m.ETag() == "" {
		t.Errorf("final Machine %+v", m.Properties)
	}
	reqs := e.arm.Requests()
	if reqs[0].Method != http.MethodPut || reqs[0].IfNoneMatch != "*" || reqs[0].IfMatch != "" {
		t.Errorf("first request %+v", reqs[0])
	}
	if n := countKind(reqs, http.MethodGet, fakearm.KindOperation); n != 3 {
		t.Errorf("%d operation polls, want 3", n)
	}
	if last := reqs[len(reqs)-1]; last.Method != http.MethodGet || last.Kind != fakearm.KindMachine {
		t.Errorf("the operation's end is not followed by a GET of the Machine: %+v", last)
	}
	for _, r := range reqs {
		if r.APIVersion != config.DefaultMachineAPIVersion {
			t.Errorf("%s %s without the api-version", r.Method, r.Path)
		}
	}
	// Polled at the answers' Retry-After, exactly.
	if s := e.clk.Sleeps(); len(s) != 3 || s[0] != 7*time.Second || s[2] != 7*time.Second {
		t.Errorf("waits %v, want 3 of 7s", s)
	}
}

func TestPollWithoutRetryAfterUsesABoundedBackoff(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Poll = Poll{Initial: time.Second, Max: 4 * time.Second, MaxRetryAfter: time.Minute, Timeout: time.Minute}
	})
	e.arm.SetPolling(6, "")
	if _, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	s := e.clk.Sleeps()
	if len(s) != 6 {
		t.Fatalf("waits %v", s)
	}
	for i, d := range s {
		nominal := min(time.Second<<i, 4*time.Second)
		if d < nominal*4/5 || d > nominal*6/5 {
			t.Errorf("wait %d is %v, want %v ±20%%", i, d, nominal)
		}
	}
}

func TestSynchronousPutNeedsNoPolling(t *testing.T) {
	e := newEnv(t)
	e.arm.SetPolling(0, "")
	m, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
	if err != nil || m.Properties.ProvisioningState != StateSucceeded {
		t.Fatalf("%v %v", m, err)
	}
	if reqs := e.arm.Requests(); len(reqs) != 1 {
		t.Errorf("%d requests, want the PUT alone", len(reqs))
	}
}

func TestUpdateSendsIfMatchWithTheETag(t *testing.T) {
	e := newEnv(t)
	etag := e.arm.SetMachine(e.id.String(), map[string]any{"orchestratorVersion": "1.34.0"})
	m, err := e.c.Put(context.Background(), want135(), Precondition{IfMatch: etag})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != "1.35.0" || m.ETag() == etag {
		t.Errorf("version %q eTag %q (was %q)", m.Version(), m.ETag(), etag)
	}
	if r := e.arm.Requests()[0]; r.IfMatch != etag || r.IfNoneMatch != "" {
		t.Errorf("PUT %+v", r)
	}
	// The old eTag no longer matches: 412.
	_, err = e.c.Put(context.Background(), want135(), Precondition{IfMatch: etag})
	if !IsPreconditionFailed(err) || Code(err) != "PreconditionFailed" {
		t.Errorf("stale If-Match: %v", err)
	}
	// If-None-Match on an existing Machine: 412.
	if _, err = e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true}); !IsPreconditionFailed(err) {
		t.Errorf("If-None-Match on an existing Machine: %v", err)
	}
}

func TestFailedOperationNamesCodeMessageAndProvisioningError(t *testing.T) {
	for _, state := range []string{StateFailed, StateCanceled} {
		t.Run(state, func(t *testing.T) {
			e := newEnv(t)
			e.arm.FailNextOperation(fakearm.Failure{State: state, Code: "VMExtensionProvisioningError", Message: "the node did not come up",
				ProvisioningCode: "NodeNotReady", ProvisioningMsg: "kubelet never posted Ready"})
			_, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("want *Error, got %v", err)
			}
			if ae.State != state || ae.Code != "VMExtensionProvisioningError" || ae.Message != "the node did not come up" ||
				ae.ProvisioningError == nil || ae.ProvisioningError.Code != "NodeNotReady" {
				t.Errorf("%+v", ae)
			}
			for _, s := range []string{e.id.String(), "operation " + state, "VMExtensionProvisioningError", "the node did not come up", "status.provisioningError: NodeNotReady: kubelet never posted Ready"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q lacks %q", err, s)
				}
			}
		})
	}
}

func Test429IsRetriedAtRetryAfterWithJitter(t *testing.T) {
	e := newEnv(t)
	e.arm.Inject(fakearm.Fault{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusTooManyRequests, Code: "TooManyRequests", Message: "slow down", RetryAfter: "5", Times: 3})
	if _, err := e.c.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := e.clk.Sleeps()
	if len(s) != 3 {
		t.Fatalf("waits %v, want 3", s)
	}
	for _, d := range s {
		if d < 5*time.Second || d > 6*time.Second {
			t.Errorf("wait %v: want Retry-After 5s plus at most 20%%", d)
		}
	}
	if countKind(e.arm.Requests(), http.MethodGet, fakearm.KindMachine) != 4 {
		t.Errorf("requests %+v", e.arm.Requests())
	}
}

func Test5xxIsRetriedBoundedInCount(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Retry = Retry{MaxRetries: 3, MaxElapsed: time.Hour, BaseDelay: time.Second, MaxDelay: 8 * time.Second, MaxRetryAfter: time.Minute}
	})
	e.arm.Inject(fakearm.Fault{Status: http.StatusServiceUnavailable, Code: "ServiceUnavailable", Message: "try later", Times: 100})
	_, err := e.c.Get(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "ServiceUnavailable" {
		t.Fatalf("got %v", err)
	}
	if n := len(e.arm.Requests()); n != 4 {
		t.Errorf("%d requests, want 1 + 3 retries", n)
	}
	for i, d := range e.clk.Sleeps() {
		nominal := time.Second << i
		if d < nominal*4/5 || d > nominal*6/5 {
			t.Errorf("wait %d %v, want %v ±20%%", i, d, nominal)
		}
	}
}

func TestRetriesAreBoundedInTime(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Retry = Retry{MaxRetries: 100, MaxElapsed: 20 * time.Second, BaseDelay: time.Second, MaxDelay: 8 * time.Second, MaxRetryAfter: time.Minute}
	})
	e.arm.Inject(fakearm.Fault{Status: http.StatusTooManyRequests, Code: "TooManyRequests", RetryAfter: "6", Times: 100})
	_, err := e.c.Get(context.Background())
	if statusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("got %v", err)
	}
	var total time.Duration
	for _, d := range e.clk.Sleeps() {
		total += d
	}
	if total > 20*time.Second || len(e.clk.Sleeps()) < 2 {
		t.Errorf("waited %v in %v, want under the 20s budget", total, e.clk.Sleeps())
	}
}

func TestRetryAfterBeyondTheBoundIsNotWaited(t *testing.T) {
	e := newEnv(t)
	e.arm.Inject(fakearm.Fault{Status: http.StatusTooManyRequests, Code: "TooManyRequests", RetryAfter: "3600", Times: 5})
	_, err := e.c.Get(context.Background())
	if statusOf(err) != http.StatusTooManyRequests || len(e.clk.Sleeps()) != 0 || len(e.arm.Requests()) != 1 {
		t.Errorf("err %v, waits %v, %d requests", err, e.clk.Sleeps(), len(e.arm.Requests()))
	}
}

func Test403NamesResourceIdentityAndARMCode(t *testing.T) {
	e := newEnv(t)
	e.arm.Inject(fakearm.Fault{Method: http.MethodPut, Status: http.StatusForbidden, Code: "AuthorizationFailed",
		Message: "The client does not have authorization to perform action 'Microsoft.ContainerService/managedClusters/agentPools/machines/write'."})
	_, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
	if Code(err) != "AuthorizationFailed" {
		t.Fatalf("got %v", err)
	}
	for _, s := range []string{e.id.String(), "403", "AuthorizationFailed", e.appID, "machines/write"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if len(e.arm.Requests()) != 1 {
		t.Error("a 403 was retried")
	}
}

func TestTokenForAnotherAudienceIs401NamingTheIdentity(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Audience = "https://management.core.windows.net/" })
	_, err := e.c.Get(context.Background())
	if statusOf(err) != http.StatusUnauthorized || Code(err) != "InvalidAuthenticationToken" || !strings.Contains(err.Error(), e.appID) || !strings.Contains(err.Error(), e.id.String()) {
		t.Fatalf("got %v", err)
	}
}

func Test409IsReportedWithItsCode(t *testing.T) {
	e := newEnv(t)
	e.arm.Inject(fakearm.Fault{Method: http.MethodPut, Status: http.StatusConflict, Code: "OperationNotAllowed", Message: "Another operation is in progress"})
	_, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
	if statusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "OperationNotAllowed: Another operation is in progress") {
		t.Fatalf("got %v", err)
	}
}

func TestSlowPollsAreWaitedFor(t *testing.T) {
	e := newEnv(t)
	e.arm.SetPolling(2, "1")
	e.arm.Inject(fakearm.Fault{Kind: fakearm.KindOperation, Delay: 300 * time.Millisecond, Times: 2})
	start := time.Now()
	if _, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 600*time.Millisecond {
		t.Error("the slow answers were not waited for")
	}
}

func TestPollTimeoutEndsTheWait(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Poll = Poll{Initial: time.Second, Max: time.Second, MaxRetryAfter: time.Second, Timeout: 200 * time.Millisecond}
	})
	e.arm.SetPolling(1000, "")
	e.arm.Inject(fakearm.Fault{Kind: fakearm.KindOperation, Delay: 100 * time.Millisecond, Times: 1000})
	_, err := e.c.Put(context.Background(), want135(), Precondition{IfNoneMatch: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

func TestUnservedAPIVersionIsARMsError(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.APIVersion = "2019-01-01" })
	_, err := e.c.Get(context.Background())
	if Code(err) != "NoRegisteredProviderFound" || !strings.Contains(err.Error(), "2019-01-01") {
		t.Fatalf("got %v", err)
	}
}

func TestListFollowsNextLink(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		e.arm.SetMachine(testID(n).String(), map[string]any{"orchestratorVersion": "1.35.0"})
	}
	e.arm.SetMachine(MachineID{Cluster: e.id.Cluster, Pool: "other", Name: "x"}.String(), map[string]any{})
	ms, err := e.c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	if strings.Join(names, ",") != "a,b,c,d,e" {
		t.Errorf("listed %v", names)
	}
	if n := countKind(e.arm.Requests(), http.MethodGet, fakearm.KindList); n != 3 {
		t.Errorf("%d pages, want 3", n)
	}
}

func TestNewRefusesPlainHTTP(t *testing.T) {
	_, err := New(Options{ID: testID("n"), Endpoint: "http://127.0.0.1:1", APIVersion: "2025-10-02-preview", Tokens: nil})
	if err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("got %v", err)
	}
}

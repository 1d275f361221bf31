package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	opt := Policy{PlainHTTPHost: "10.1.2.3:5000", OptIn: "bootstrap.ociImagePlainHTTP"}
	for _, tc := range []struct {
		p    Policy
		url  string
		want bool
	}{
		{Policy{}, "https://10.1.2.3:5000/v2/", true},
		{Policy{}, "https://mcr.microsoft.com/v2/", true},
		{Policy{}, "http://127.0.0.1:5000/v2/", true},
		{Policy{}, "http://127.9.9.9/x", true},
		{Policy{}, "http://localhost:5000/v2/", true},
		{Policy{}, "http://[::1]:5000/v2/", true},
		// go-containerregistry would use plain HTTP for all of these.
		{Policy{}, "http://10.1.2.3:5000/v2/", false},
		{Policy{}, "http://192.168.1.1/v2/", false},
		{Policy{}, "http://172.16.0.1/v2/", false},
		{Policy{}, "http://registry.local/v2/", false},
		{Policy{}, "http://0.0.0.0/v2/", false},
		{Policy{}, "http://127.example.com/v2/", false},
		{Policy{}, "ftp://127.0.0.1/x", false},
		{Policy{}, "file:///etc/passwd", false},
		{opt, "http://10.1.2.3:5000/v2/", true},
		// The opt-in is for that host only: not a redirect elsewhere.
		{opt, "http://10.1.2.3:5001/v2/", false},
		{opt, "http://10.1.2.4:5000/v2/", false},
		{Policy{PlainHTTPHost: "registry.lan"}, "http://REGISTRY.lan:80/v2/", true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		err = tc.p.Allow(u)
		if (err == nil) != tc.want {
			t.Errorf("%+v Allow(%s) = %v, want allowed=%v", tc.p, tc.url, err, tc.want)
		}
		var re *RefusedError
		if err != nil && (!errors.As(err, &re) || !strings.Contains(err.Error(), "https")) {
			t.Errorf("%s: refusal %v is not a *RefusedError naming https", tc.url, err)
		}
	}
}

func TestRefusalNamesOptIn(t *testing.T) {
	u, _ := url.Parse("http://10.1.2.3:5000/v2/")
	err := Policy{OptIn: "bootstrap.ociImagePlainHTTP"}.Allow(u)
	for _, want := range []string{"plain HTTP", "10.1.2.3:5000", "https", "bootstrap.ociImagePlainHTTP"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v does not name %q", err, want)
		}
	}
}

// TestRedirectToPlainHTTPRefused: the check runs on every hop, so a
// loopback server cannot bounce a fetch to plain HTTP on the network. The
// refusal comes before any connection to 10.0.0.1 is attempted.
func TestRedirectToPlainHTTPRefused(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://10.0.0.1:9/x", http.StatusFound))
	defer srv.Close()
	_, err := Policy{}.Get(context.Background(), srv.URL, 1<<20)
	var re *RefusedError
	if !errors.As(err, &re) || re.Host != "10.0.0.1:9" {
		t.Fatalf("redirect to plain HTTP: %v", err)
	}
}

// stallServer sends 7 bytes of a 1 MiB body, then nothing until the test
// ends: the server the issue describes.
func stallServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	release := make(chan struct{})
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Length", "1048576")
		w.Write([]byte("kubelet"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, &hits
}

func TestStalledBodyFailsWithinIdle(t *testing.T) {
	srv, _ := stallServer(t)
	p := Policy{Limits: Limits{Idle: 300 * time.Millisecond}}
	body, err := p.Get(context.Background(), srv.URL, MaxFile)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, body)
	took := time.Since(start)
	var te *TimeoutError
	if !errors.As(err, &te) || te.Limit != "idle" || n != 7 {
		t.Fatalf("read %d bytes, err %v; want 7 and an idle TimeoutError", n, err)
	}
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("stall detected after %v, want about 300ms", took)
	}
	t.Logf("stalled body failed after %v: %v", took.Round(time.Millisecond), err)
}

// TestSlowConsumerIsNotAStall: only time spent waiting on the server
// counts; a consumer pausing between reads longer than Idle is fine.
func TestSlowConsumerIsNotAStall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 64<<10)))
	}))
	defer srv.Close()
	body, err := Policy{Limits: Limits{Idle: 100 * time.Millisecond}}.Get(context.Background(), srv.URL, MaxFile)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	buf := make([]byte, 16<<10)
	var total int
	for {
		n, err := body.Read(buf)
		total += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", total, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if total != 64<<10 {
		t.Errorf("read %d bytes", total)
	}
}

func TestTotalBound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A byte every 50ms: never idle for long, never done.
		for i := 0; ; i++ {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()
	start := time.Now()
	body, err := Policy{Limits: Limits{Idle: time.Second, Total: 400 * time.Millisecond}}.Get(context.Background(), srv.URL, MaxFile)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	_, err = io.Copy(io.Discard, body)
	var te *TimeoutError
	if !errors.As(err, &te) || te.Limit != "total" {
		t.Fatalf("err %v, want a total TimeoutError", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("total bound hit after %v, want about 400ms", took)
	}
}

func TestResponseHeaderBound(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	_, err := Policy{Limits: Limits{ResponseHeader: 200 * time.Millisecond}}.Get(context.Background(), srv.URL, MaxFile)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("header bound hit after %v", took)
	}
}

func TestSizeCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush() // no Content-Length
		} else {
			w.Header().Set("Content-Length", "4096")
		}
		w.Write([]byte(strings.Repeat("x", 4096)))
	}))
	defer srv.Close()
	var tl *TooLargeError
	if _, err := (Policy{}).Get(context.Background(), srv.URL+"/sized", 1024); !errors.As(err, &tl) || tl.Size != 4096 {
		t.Errorf("announced 4096 > 1024: %v", err)
	}
	body, err := Policy{}.Get(context.Background(), srv.URL+"/chunked", 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	n, err := io.Copy(io.Discard, body)
	if !errors.As(err, &tl) || n > 1025 {
		t.Errorf("chunked 4096 > 1024: read %d, %v", n, err)
	}
}

func TestStatusIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := (Policy{}).Get(context.Background(), srv.URL+"/x", 1024); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("err %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1:5000": true, "localhost:5000": true, "[::1]:5000": true, "localhost": true, "LOCALHOST": true,
		"mcr.microsoft.com": false, "10.0.0.1:5000": false, "127.example.com": false, "[::]:5000": false,
	} {
		if got := IsLoopback(h); got != want {
			t.Errorf("IsLoopback(%q) = %v", h, got)
		}
	}
}

package artifact

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/transport"
)

// stallingUpstream answers every checksum file and sends the first 7
// bytes of each payload, then nothing until the test ends: the server
// that held Fetch for 10 minutes.
func stallingUpstream(t *testing.T) []Download {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".sha256") {
			w.Write([]byte(strings.Repeat("a", 64)))
			return
		}
		w.Header().Set("Content-Length", "104857600")
		w.Write([]byte("kubelet"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"}.URLs(testComponents, runtime.GOARCH)[:1]
}

// TestFetchStalledServerFailsWithinIdle: a stalled download fails after
// the idle bound, names the stall, and leaves no temp file.
func TestFetchStalledServerFailsWithinIdle(t *testing.T) {
	ds := stallingUpstream(t)
	dest := t.TempDir()
	idle := 500 * time.Millisecond
	start := time.Now()
	err := Fetch(context.Background(), transport.Policy{Limits: transport.Limits{Idle: idle}}, ds, dest)
	took := time.Since(start)
	var te *transport.TimeoutError
	if !errors.As(err, &te) || te.Limit != "idle" || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("err = %v, want an idle timeout", err)
	}
	if took < idle || took > idle+2*time.Second {
		t.Errorf("Fetch returned after %v, want about %v", took, idle)
	}
	t.Logf("stalled download failed after %v: %v", took.Round(time.Millisecond), err)
	if entries, _ := os.ReadDir(filepath.Join(dest, filepath.Dir(ds[0].Path))); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestFetchSizeCap: a payload announcing more than transport.MaxFile is
// refused before its body is read.
func TestFetchSizeCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".sha256") {
			w.Write([]byte(strings.Repeat("a", 64)))
			return
		}
		w.Header().Set("Content-Length", "1073741824")
		w.Write([]byte("x"))
	}))
	defer srv.Close()
	ds := Upstream{KubernetesURL: srv.URL, GitHubURL: srv.URL + "/gh"}.URLs(testComponents, runtime.GOARCH)[:1]
	var tl *transport.TooLargeError
	if err := Fetch(context.Background(), transport.Policy{}, ds, t.TempDir()); !errors.As(err, &tl) {
		t.Fatalf("err = %v, want a TooLargeError", err)
	}
}

// TestFetchRefusesPlainHTTPUpstream: an upstream site on plain HTTP that
// is not loopback is refused before any connection is made.
func TestFetchRefusesPlainHTTPUpstream(t *testing.T) {
	ds := Upstream{KubernetesURL: "http://10.0.0.1:9", GitHubURL: "http://10.0.0.1:9/gh"}.URLs(testComponents, runtime.GOARCH)[:1]
	err := Fetch(context.Background(), transport.Policy{}, ds, t.TempDir())
	var re *transport.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "https") {
		t.Fatalf("err = %v", err)
	}
}

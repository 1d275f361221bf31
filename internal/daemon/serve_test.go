package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/metrics"
)

// unixClient talks HTTP over the agent's socket, as curl --unix-socket does.
func unixClient(socket string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
}

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// servedAddress is the TCP address the agent logged it serves on: it
// was given port 0 (a port picked free and then handed over could be
// taken in between), and says which port it got, as an operator reads it.
func servedAddress(t *testing.T, log string) string {
	t.Helper()
	m := regexp.MustCompile(`msg="serving /healthz and /metrics" address=(\S+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the agent did not log the TCP address it serves on:\n%s", log)
	}
	return m[1]
}

// /healthz is 200 while the local loop passes and 503, naming the loop and
// its error, while it fails; /metrics parses and times each pass. The
// socket is root's only and is gone when the agent stops.
func TestHealthAndMetricsServed(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o755); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	var log syncBuf
	passes := make(chan struct{}, 100)
	a := &Agent{
		Layout: l, Log: slog.New(slog.NewTextHandler(&log, nil)), Interval: 20 * time.Millisecond,
		Metrics: metrics.NewRegistry(l), Socket: l.OnRoot(l.AgentSocket()), TCPAddress: "127.0.0.1:0",
		Loops: []Loop{{Name: "keep-machine", Local: true, Run: func(context.Context) error {
			defer func() { passes <- struct{}{} }()
			if failing.Load() {
				return errors.New("machinectl start kube1: Unit systemd-nspawn@kube1.service is masked")
			}
			return nil
		}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	c := unixClient(a.Socket)
	waitFor := func(code int) []byte {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			<-passes
			<-passes // a full pass since the change
			if _, err := os.Stat(a.Socket); err == nil {
				got, body := get(t, c, "http://agent/healthz")
				if got == code {
					return body
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/healthz never answered %d", code)
			}
		}
	}
	var rep HealthReport
	if err := json.Unmarshal(waitFor(200), &rep); err != nil || rep.Status != StatusOK || rep.Loops["keep-machine"].LastSuccess == nil {
		t.Fatalf("healthy report: %+v %v", rep, err)
	}
	failing.Store(true)
	if err := json.Unmarshal(waitFor(503), &rep); err != nil || rep.Status != StatusUnhealthy || rep.Reason != "keep-machine: machinectl start kube1: Unit systemd-nspawn@kube1.service is masked" {
		t.Fatalf("unhealthy report: %+v %v", rep, err)
	}
	failing.Store(false)
	waitFor(200)

	fi, err := os.Stat(a.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v %v, want mode 0600", fi, err)
	}
	// The same on the configured TCP address.
	for _, url := range []string{"http://agent/metrics", "http://" + servedAddress(t, log.String()) + "/metrics"} {
		client := c
		if url[7] != 'a' {
			client = http.DefaultClient
		}
		code, body := get(t, client, url)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if code != 200 || err != nil {
			t.Fatalf("%s: %d %v", url, code, err)
		}
		if h := fams["aks_flex_node_reconcile_duration_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() < 3 {
			t.Errorf("%s: reconcile histogram %v", url, h)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(a.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left behind after the agent stopped: %v", err)
	}
}

// The agent never creates the state dir for its socket (reset must find
// only what start tracked); it starts serving once start made the dir.
func TestSocketWaitsForStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if _, err := listenSocket(filepath.Join(dir, "agent.sock")); err == nil {
		t.Fatal("listened without the state dir")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("the state dir was created")
	}
	// Something that is not a socket in its place is left alone.
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "agent.sock"), []byte("x"), 0o600)
	if _, err := listenSocket(filepath.Join(dir, "agent.sock")); err == nil {
		t.Fatal("replaced a regular file with the socket")
	}
}

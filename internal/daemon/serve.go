package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// listenRetry is how often the agent tries again to listen on its socket
// while the state dir is not there (a host not yet joined).
const listenRetry = 10 * time.Second

// handler is the agent's HTTP surface: /healthz and /metrics.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", a.Health)
	if a.Metrics != nil {
		mux.Handle("/metrics", a.Metrics.Handler())
	} else {
		mux.Handle("/metrics", http.NotFoundHandler())
	}
	return mux
}

// serve serves the handler on the socket in the state dir and, when
// configured, on a TCP address, until ctx ends. The socket waits for the
// state dir rather than creating it: start creates and tracks that dir,
// and reset must find nothing there it did not track.
func (a *Agent) serve(ctx context.Context, g *wait.Group) {
	h := a.handler()
	if a.Socket != "" {
		g.StartWithContext(ctx, func(ctx context.Context) {
			var ln net.Listener
			logged := false
			err := wait.PollUntilContextCancel(ctx, listenRetry, true, func(context.Context) (bool, error) {
				var err error
				if ln, err = listenSocket(a.Socket); err != nil {
					if !logged {
						a.Log.Info("not serving /healthz and /metrics on the socket yet", "socket", a.Socket, "reason", err, "retry-every", listenRetry)
						logged = true
					}
					return false, nil
				}
				return true, nil
			})
			if err != nil {
				return // stopped before the state dir appeared
			}
			a.Log.Info("serving /healthz and /metrics", "socket", a.Socket)
			serveOn(ctx, ln, h)
		})
	}
	if a.TCPAddress != "" {
		ln, err := net.Listen("tcp", a.TCPAddress)
		if err != nil {
			a.Log.Error("cannot serve /healthz and /metrics on agent.metricsAddress", "address", a.TCPAddress, "error", err)
			return
		}
		a.Log.Info("serving /healthz and /metrics", "address", ln.Addr().String())
		g.StartWithContext(ctx, func(ctx context.Context) { serveOn(ctx, ln, h) })
	}
}

// serveOn serves h on ln until ctx ends, and returns once the listener is
// closed (and a socket removed).
func serveOn(ctx context.Context, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	_ = srv.Serve(ln)
	<-stopped
}

// listenSocket listens on the Unix socket path, readable and writable by
// root only: it is bound under a temporary name, made 0600, then renamed
// into place, so there is no moment at which others may connect. A stale
// socket of an agent that was killed is replaced; anything else at path
// is left alone and is an error.
func listenSocket(path string) (net.Listener, error) {
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	}
	tmp := path + "." + strconv.Itoa(os.Getpid()) + ".tmp"
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := errors.Join(os.Chmod(tmp, 0o600), os.Rename(tmp, path)); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	return &removeOnClose{UnixListener: ln, path: path}, nil
}

// removeOnClose removes the socket when the agent stops listening, so
// nothing stale is left for the next agent or for reset.
type removeOnClose struct {
	*net.UnixListener
	path string
}

func (l *removeOnClose) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
	return err
}

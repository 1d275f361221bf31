package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Limits bound one request. Without them a server that stops sending
// after 7 bytes holds a start (and the node lock) forever.
type Limits struct {
	// Connect bounds the TCP connect, TLSHandshake the TLS handshake,
	// ResponseHeader the wait from the request written to the response
	// headers.
	Connect, TLSHandshake, ResponseHeader time.Duration
	// Idle bounds each wait for the next bytes of the body. Only time
	// spent waiting on the server counts, not time the consumer spends
	// between reads (writing a large file to a slow disk).
	Idle time.Duration
	// Total bounds the whole request, headers and body.
	Total time.Duration
}

// DefaultLimits are the bounds of every fetch. Total allows a 2 GiB layer
// at 1 MiB/s; Idle is what a stalled server costs.
var DefaultLimits = Limits{
	Connect:        30 * time.Second,
	TLSHandshake:   15 * time.Second,
	ResponseHeader: 60 * time.Second,
	Idle:           60 * time.Second,
	Total:          60 * time.Minute,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	for _, f := range []struct{ v, def *time.Duration }{
		{&l.Connect, &d.Connect}, {&l.TLSHandshake, &d.TLSHandshake}, {&l.ResponseHeader, &d.ResponseHeader},
		{&l.Idle, &d.Idle}, {&l.Total, &d.Total},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// bases are the shared connection pools, one pair per set of limits, so
// every fetch with the same limits reuses connections.
var bases sync.Map // Limits -> *basePair

type basePair struct{ any, loopback *http.Transport }

func basesFor(l Limits) *basePair {
	if b, ok := bases.Load(l); ok {
		return b.(*basePair)
	}
	b, _ := bases.LoadOrStore(l, &basePair{any: newBase(l, false), loopback: newBase(l, true)})
	return b.(*basePair)
}

// newBase is an http.Transport with the limits. The loopback one carries
// the plain-HTTP requests allowed because their host is loopback: it is
// never proxied, and its dialer refuses an address that is not loopback,
// so "localhost" mapped elsewhere cannot carry plain HTTP off the host.
func newBase(l Limits, loopback bool) *http.Transport {
	d := &net.Dialer{Timeout: l.Connect, KeepAlive: 30 * time.Second}
	proxy := http.ProxyFromEnvironment
	if loopback {
		proxy = nil
		d.Control = func(_, address string, _ syscall.RawConn) error {
			if host, _, err := net.SplitHostPort(address); err != nil || !net.ParseIP(host).IsLoopback() {
				return fmt.Errorf("refusing plain HTTP to %s: the name resolved to an address that is not loopback", address)
			}
			return nil
		}
	}
	return &http.Transport{
		Proxy:                 proxy,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   l.TLSHandshake,
		ResponseHeaderTimeout: l.ResponseHeader,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          32,
	}
}

// RoundTripper is the policy as an http.RoundTripper: every request, and
// so every redirect hop, is checked by Allow before it is sent, and
// bounded by the limits. go-containerregistry's remote takes it with
// remote.WithTransport.
func (p Policy) RoundTripper() http.RoundTripper {
	l := p.Limits.withDefaults()
	return &roundTripper{p: p, l: l, bases: basesFor(l)}
}

// Client is the one HTTP client for URL fetches under the policy.
func (p Policy) Client() *http.Client {
	return &http.Client{Transport: p.RoundTripper(), CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("stopped after %d redirects (last to %s)", len(via), req.URL.Redacted())
		}
		return nil
	}}
}

type roundTripper struct {
	p     Policy
	l     Limits
	bases *basePair
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := rt.p.Allow(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	base := rt.bases.any
	if req.URL.Scheme == "http" && IsLoopback(req.URL.Host) {
		base = rt.bases.loopback
	}
	what := req.Method + " " + req.URL.Redacted()
	ctx, cancelTotal := context.WithTimeoutCause(req.Context(), rt.l.Total, &TimeoutError{What: what, Limit: "total", After: rt.l.Total})
	ctx, cancel := context.WithCancelCause(ctx)
	resp, err := base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		err = causeOf(ctx, err)
		cancel(nil)
		cancelTotal()
		return nil, err
	}
	wb := &watchedBody{rc: resp.Body, ctx: ctx, done: func() { cancel(nil); cancelTotal() }}
	stall := &TimeoutError{What: what, Limit: "idle", After: rt.l.Idle}
	wb.timer = time.AfterFunc(rt.l.Idle, func() { cancel(stall) })
	wb.timer.Stop()
	wb.idle = rt.l.Idle
	resp.Body = wb
	return resp, nil
}

// TimeoutError is a request that passed one of its limits.
type TimeoutError struct {
	What  string // "GET https://..."
	Limit string // "idle" or "total"
	After time.Duration
}

func (e *TimeoutError) Error() string {
	if e.Limit == "idle" {
		return fmt.Sprintf("%s: no data from the server for %v (the transfer stalled)", e.What, e.After)
	}
	return fmt.Sprintf("%s: not finished after %v", e.What, e.After)
}

// Timeout makes a TimeoutError a net.Error timeout.
func (e *TimeoutError) Timeout() bool { return true }

// causeOf prefers the limit that ended ctx over the transport's generic
// "context canceled".
func causeOf(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	var te *TimeoutError
	if c := context.Cause(ctx); errors.As(c, &te) && !errors.As(err, &te) {
		return fmt.Errorf("%w (%v)", te, err)
	}
	return err
}

// watchedBody arms the idle timer around each read and releases the
// request's contexts when the body is closed.
type watchedBody struct {
	rc    io.ReadCloser
	ctx   context.Context
	timer *time.Timer
	idle  time.Duration
	done  func()
	once  sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		err = causeOf(b.ctx, err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() {
		b.timer.Stop()
		b.done()
	})
	return err
}

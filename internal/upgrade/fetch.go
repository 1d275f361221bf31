package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// openCandidate opens the candidate binary from a local file or a URL. A
// URL must be https; plain http is accepted only for a loopback host (a
// local mirror or a test server), since the checksum protects integrity
// but not what a network observer learns.
func openCandidate(ctx context.Context, binary, rawURL string) (io.ReadCloser, string, error) {
	switch {
	case binary != "" && rawURL != "":
		return nil, "", &RefusedError{Reason: "give --binary or --url, not both"}
	case binary != "":
		f, err := os.Open(binary)
		if err != nil {
			return nil, "", &RefusedError{Reason: fmt.Sprintf("--binary: %v", err)}
		}
		return f, binary, nil
	case rawURL != "":
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, "", &RefusedError{Reason: fmt.Sprintf("--url: %v", err)}
		}
		if err := checkURL(u); err != nil {
			return nil, "", err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, "", err
		}
		client := &http.Client{Timeout: 10 * time.Minute, CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return checkURL(r.URL)
		}}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", fmt.Errorf("download %s: %w", u.Redacted(), err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, "", fmt.Errorf("download %s: %s", u.Redacted(), resp.Status)
		}
		if resp.ContentLength > maxCandidateSize {
			resp.Body.Close()
			return nil, "", &RefusedError{Reason: fmt.Sprintf("download %s: %d bytes is more than an agent binary can be (%d); nothing was changed", u.Redacted(), resp.ContentLength, maxCandidateSize)}
		}
		return &capped{r: io.LimitReader(resp.Body, maxCandidateSize+1), c: resp.Body, what: u.Redacted()}, u.Redacted(), nil
	}
	return nil, "", &RefusedError{Reason: "no candidate: give --binary PATH or --url URL"}
}

func checkURL(u *url.URL) error {
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if host == "localhost" {
			return nil
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return nil
		}
		return &RefusedError{Reason: fmt.Sprintf("--url %s: plain http is accepted only for a loopback host; use https", u.Redacted())}
	}
	return &RefusedError{Reason: fmt.Sprintf("--url %s: scheme %q is not https", u.Redacted(), u.Scheme)}
}

// maxCandidateSize bounds a downloaded candidate: the agent is a few tens of
// MiB, and a server that never stops sending must not fill the lib dir's
// filesystem (which may be /opt, next to everything else).
var maxCandidateSize int64 = 512 << 20

// capped reads a download and fails once it passes maxCandidateSize.
type capped struct {
	r    io.Reader
	c    io.Closer
	n    int64
	what string
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > maxCandidateSize {
		return n, fmt.Errorf("download %s: more than %d bytes, more than an agent binary can be", c.what, maxCandidateSize)
	}
	return n, err
}

func (c *capped) Close() error { return c.c.Close() }

package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// MaxFile caps a single downloaded file that no manifest sizes: an
// upstream release file or an agent binary (each a few tens of MiB). A
// server that never stops sending must not fill the disk the state dir
// or the lib dir is on.
const MaxFile int64 = 512 << 20

// Get fetches rawURL under the policy and returns its body, which must be
// closed. Anything but 200 is an error naming the status. The body is
// capped at max bytes: a Content-Length above it is refused before
// anything is read (a *TooLargeError), and a body that runs past it fails
// the read that crosses the cap.
func (p Policy) Get(ctx context.Context, rawURL string, max int64) (io.ReadCloser, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if err := p.Allow(u); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.Client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	if resp.ContentLength > max {
		resp.Body.Close()
		return nil, &TooLargeError{URL: u.Redacted(), Max: max, Size: resp.ContentLength}
	}
	return &capped{rc: resp.Body, max: max, url: u.Redacted()}, nil
}

// TooLargeError is a body larger than its cap. Size is the announced
// length, or -1 when the cap was found while reading.
type TooLargeError struct {
	URL       string
	Max, Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("GET %s: %d bytes, more than the %d allowed", e.URL, e.Size, e.Max)
	}
	return fmt.Sprintf("GET %s: more than the %d bytes allowed", e.URL, e.Max)
}

// capped fails the read that takes a body past max.
type capped struct {
	rc  io.ReadCloser
	n   int64
	max int64
	url string
}

func (c *capped) Read(p []byte) (int, error) {
	if int64(len(p)) > c.max-c.n+1 {
		p = p[:c.max-c.n+1]
	}
	n, err := c.rc.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, &TooLargeError{URL: c.url, Max: c.max, Size: -1}
	}
	return n, err
}

func (c *capped) Close() error { return c.rc.Close() }

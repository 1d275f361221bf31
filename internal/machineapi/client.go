package machineapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/Azure/aks-flex-node/internal/transport"
)

// Options make a Client.
type Options struct {
	ID MachineID
	// Endpoint is the ARM endpoint (https://host[:port]) and Audience its
	// tokens' audience (see Endpoint).
	Endpoint, Audience string
	// APIVersion is the machine API's api-version.
	APIVersion string
	Tokens     TokenSource
	// Identity names the identity the tokens are for, for messages.
	Identity string
	// HTTPClient sends the requests; nil is the transport policy's
	// client (https, bounded). Tests give one trusting their CA.
	HTTPClient *http.Client
	Retry      Retry
	Poll       Poll
	// Sleep waits between retries and polls; nil is Sleep. Now is the
	// clock the retry budget is kept by; nil is time.Now. Tests give a
	// Sleep that advances their Now.
	Sleep Sleeper
	Now   func() time.Time
}

// Limits bound each ARM request: ARM answers within seconds; an answer
// that takes longer is retried rather than waited for.
var Limits = transport.Limits{Connect: 10 * time.Second, TLSHandshake: 10 * time.Second, ResponseHeader: 30 * time.Second, Idle: 30 * time.Second, Total: time.Minute}

// Client calls the machine API for one Machine.
type Client struct {
	o    Options
	base *url.URL
	pl   runtime.Pipeline
}

// New makes a Client. The endpoint must be https.
func New(o Options) (*Client, error) {
	base, err := url.Parse(o.Endpoint)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("ARM endpoint %q: must be https://host[:port]", o.Endpoint)
	}
	if o.APIVersion == "" || o.Tokens == nil {
		return nil, fmt.Errorf("machine client for %s: an api-version and a token source are required", o.ID)
	}
	if o.Retry == (Retry{}) {
		o.Retry = DefaultRetry
	}
	if o.Poll == (Poll{}) {
		o.Poll = DefaultPoll
	}
	if o.Sleep == nil {
		o.Sleep = Sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = transport.Policy{Limits: Limits}.Client()
	}
	rp := &retryPolicy{r: o.Retry, sleep: o.Sleep, now: o.Now}
	tp := &tokenPolicy{src: &memoSource{src: o.Tokens}, audience: o.Audience, host: base.Host, identity: o.Identity}
	pl := runtime.NewPipeline("aks-flex-node/machineapi", "v1", runtime.PipelineOptions{
		PerCall:  []policy.Policy{rp},
		PerRetry: []policy.Policy{tp},
	}, &policy.ClientOptions{
		Transport: hc,
		// The retries are rp's: azcore's honour Retry-After without
		// jitter and are not bounded in time.
		Retry: policy.RetryOptions{MaxRetries: -1},
	})
	return &Client{o: o, base: base, pl: pl}, nil
}

// ID is the Machine the client calls.
func (c *Client) ID() MachineID { return c.o.ID }

func (c *Client) url(path string) string {
	u := *c.base
	u.Path = path
	u.RawQuery = url.Values{"api-version": {c.o.APIVersion}}.Encode()
	return u.String()
}

// newRequest is a request of the machine API with a JSON body (nil for
// none).
func (c *Client) newRequest(ctx context.Context, method, rawURL string, body any) (*policy.Request, error) {
	req, err := runtime.NewRequest(ctx, method, rawURL)
	if err != nil {
		return nil, err
	}
	req.Raw().Header.Set("Accept", "application/json")
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		if err := req.SetBody(streamingNopCloser(data), "application/json"); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// apiError is the Error of an answer that is not 2xx.
func (c *Client) apiError(op string, resp *http.Response) *Error {
	_, d := readEnvelope(resp.Body)
	return &Error{Op: op, ResourceID: c.o.ID.String(), Identity: c.o.Identity, Status: resp.StatusCode, Code: d.Code, Message: d.Message}
}

// Get reads the Machine; (nil, nil) when it does not exist (404).
func (c *Client) Get(ctx context.Context) (*Machine, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.url(c.o.ID.path()), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.pl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", c.o.ID, err)
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, c.apiError("GET", resp)
	}
	return c.decode("GET", resp)
}

func (c *Client) decode(op string, resp *http.Response) (*Machine, error) {
	var m Machine
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&m); err != nil {
		return nil, fmt.Errorf("%s %s: the answer is not a Machine: %w", op, c.o.ID, err)
	}
	return &m, nil
}

// maxBody bounds what is read of a Machine or a page of a list.
const maxBody = 4 << 20

// List reads every Machine of the pool, following nextLink.
func (c *Client) List(ctx context.Context) ([]Machine, error) {
	var out []Machine
	next := c.url(c.o.ID.poolPath() + "/machines")
	for page := 0; next != ""; page++ {
		if page >= maxPages {
			return out, fmt.Errorf("LIST %s/machines: more than %d pages", c.o.ID.PoolID(), maxPages)
		}
		req, err := c.newRequest(ctx, http.MethodGet, next, nil)
		if err != nil {
			return out, err
		}
		resp, err := c.pl.Do(req)
		if err != nil {
			return out, fmt.Errorf("LIST %s/machines: %w", c.o.ID.PoolID(), err)
		}
		if resp.StatusCode != http.StatusOK {
			e := c.apiError("LIST", resp)
			e.ResourceID = c.o.ID.PoolID() + "/machines"
			drain(resp)
			return out, e
		}
		var l machineList
		err = json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&l)
		drain(resp)
		if err != nil {
			return out, fmt.Errorf("LIST %s/machines: page %d is not a machine list: %w", c.o.ID.PoolID(), page+1, err)
		}
		out = append(out, l.Value...)
		next = l.NextLink
	}
	return out, nil
}

// maxPages bounds a list: a pool holds at most a few thousand machines.
const maxPages = 1000

func drain(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		_ = resp.Body.Close()
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func streamingNopCloser(b []byte) nopCloser { return nopCloser{bytes.NewReader(b)} }

package machineapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// Poll bounds the wait for an asynchronous operation: its status is
// asked at the Retry-After of the last answer (at most MaxRetryAfter),
// else at a backoff from Initial doubling to Max, for at most Timeout.
type Poll struct {
	Initial, Max, MaxRetryAfter, Timeout time.Duration
}

// DefaultPoll are the bounds a node uses: creating a Machine for a node
// that exists already takes ARM seconds to a minute.
var DefaultPoll = Poll{Initial: 2 * time.Second, Max: 30 * time.Second, MaxRetryAfter: time.Minute, Timeout: 15 * time.Minute}

// Precondition makes a PUT conditional: IfNoneMatch creates only a
// Machine that does not exist; IfMatch updates only the Machine of that
// eTag. ARM answers 412 when the condition does not hold.
type Precondition struct {
	IfNoneMatch bool
	IfMatch     string
}

// Put creates or updates the Machine and waits for the operation: an
// answer with Azure-AsyncOperation (or a non-terminal provisioningState)
// is polled until Succeeded, Failed or Canceled, then the Machine is read
// again. A failed operation's Error names the operation's error.code and
// error.message and the Machine's status.provisioningError.
func (c *Client) Put(ctx context.Context, m *Machine, pre Precondition) (*Machine, error) {
	req, err := c.newRequest(ctx, http.MethodPut, c.url(c.o.ID.path()), m)
	if err != nil {
		return nil, err
	}
	if pre.IfNoneMatch {
		req.Raw().Header.Set("If-None-Match", "*")
	}
	if pre.IfMatch != "" {
		req.Raw().Header.Set("If-Match", pre.IfMatch)
	}
	resp, err := c.pl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("PUT %s: %w", c.o.ID, err)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusAccepted:
	default:
		defer drain(resp)
		return nil, c.apiError("PUT", resp)
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.Poll.Timeout)
	defer cancel()
	poller, err := runtime.NewPoller[Machine](resp, c.pl, nil)
	if err != nil {
		return nil, fmt.Errorf("PUT %s: %w", c.o.ID, err)
	}
	for n := 0; !poller.Done(); n++ {
		if err := c.o.Sleep(ctx, c.pollDelay(resp, n)); err != nil {
			return nil, fmt.Errorf("PUT %s: waiting for the operation: %w", c.o.ID, err)
		}
		if resp, err = poller.Poll(ctx); err != nil {
			return nil, c.operationError(ctx, err)
		}
	}
	res, err := poller.Result(ctx)
	if err != nil {
		return nil, c.operationError(ctx, err)
	}
	return &res, nil
}

// pollDelay is the wait before the n-th poll.
func (c *Client) pollDelay(resp *http.Response, n int) time.Duration {
	if ra := retryAfter(resp, c.o.Now()); ra > 0 {
		return min(ra, c.o.Poll.MaxRetryAfter)
	}
	return backoff(c.o.Poll.Initial, c.o.Poll.Max, n)
}

// operationError turns a poller's error into an Error: the operation's
// status and error from its status document, and the Machine's
// status.provisioningError read afterwards.
func (c *Client) operationError(ctx context.Context, err error) error {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return fmt.Errorf("PUT %s: waiting for the operation: %w", c.o.ID, err)
	}
	e := &Error{Op: "PUT", ResourceID: c.o.ID.String(), Identity: c.o.Identity, Status: re.StatusCode}
	body, perr := runtime.Payload(re.RawResponse)
	if perr == nil {
		state, d := readEnvelope(bytesReader(body))
		e.Code, e.Message = d.Code, d.Message
		if Terminal(state) {
			e.State, e.Status = state, 0
		}
	}
	if e.Code == "" {
		e.Code = re.ErrorCode
	}
	if e.State != "" {
		// The Machine says why, when ARM recorded it.
		if m, gerr := c.Get(ctx); gerr == nil && m != nil && m.Properties != nil && m.Properties.Status != nil {
			e.ProvisioningError = m.Properties.Status.ProvisioningError
		}
	}
	return e
}

package machineapi

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Retry bounds the retries of one request: 429 and 5xx answers and
// network errors are retried, at Retry-After when the answer has one
// (never sooner, plus up to a fifth more as jitter), else at an
// exponential backoff with jitter; at most MaxRetries times and not past
// MaxElapsed from the first try. An answer asking for more than
// MaxRetryAfter is returned as it is.
type Retry struct {
	MaxRetries    int
	MaxElapsed    time.Duration
	BaseDelay     time.Duration
	MaxDelay      time.Duration
	MaxRetryAfter time.Duration
}

// DefaultRetry are the bounds a node uses.
var DefaultRetry = Retry{MaxRetries: 6, MaxElapsed: 3 * time.Minute, BaseDelay: time.Second, MaxDelay: 30 * time.Second, MaxRetryAfter: 2 * time.Minute}

// Sleeper waits d or until ctx ends; tests record the waits.
type Sleeper func(ctx context.Context, d time.Duration) error

// Sleep is the real Sleeper.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retriable says an answer is worth asking again.
func retriable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter is an answer's Retry-After (seconds or an HTTP date), 0 for
// none.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp == nil {
		return 0
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// jitter adds up to a fifth of d.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// backoff is the n-th (from 0) delay without Retry-After: base·2^n,
// capped, with ±20 % jitter.
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d*4/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

// retryPolicy is Retry as an azcore pipeline policy.
type retryPolicy struct {
	r     Retry
	sleep Sleeper
	now   func() time.Time
}

// errNoRetry marks errors of the pipeline's own making (a token that
// could not be had, a refused URL): asking again changes nothing.
type errNoRetry struct{ err error }

func (e errNoRetry) Error() string { return e.err.Error() }
func (e errNoRetry) Unwrap() error { return e.err }

func (p *retryPolicy) Do(req *policy.Request) (*http.Response, error) {
	ctx := req.Raw().Context()
	start := p.now()
	for try := 0; ; try++ {
		if err := req.RewindBody(); err != nil {
			return nil, err
		}
		resp, err := req.Clone(ctx).Next()
		var nr errNoRetry
		switch {
		case ctx.Err() != nil, errors.As(err, &nr):
			return resp, err
		case err == nil && !retriable(resp.StatusCode):
			return resp, nil
		case try >= p.r.MaxRetries:
			return resp, err
		}
		d := backoff(p.r.BaseDelay, p.r.MaxDelay, try)
		if ra := retryAfter(resp, p.now()); ra > 0 {
			if ra > p.r.MaxRetryAfter {
				return resp, err
			}
			d = jitter(ra)
		}
		if p.now().Add(d).Sub(start) > p.r.MaxElapsed {
			return resp, err
		}
		if resp != nil {
			drain(resp)
		}
		if err := p.sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

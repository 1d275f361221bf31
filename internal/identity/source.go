package identity

import (
	"context"
	"net/http"
	"time"
)

// Source hands out tokens for one identity: from the cache while they are
// fresh, from the identity's endpoint when they are due (RefreshAt).
type Source struct {
	Spec Spec
	// Cache, when set, is shared with other processes; nil asks the
	// endpoint every time (preflight, which writes nothing).
	Cache   *Cache
	Options Options
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Token returns a token for resource that is valid for a while yet:
// cached ones until their RefreshAt, a new one after. fetched says the
// endpoint was asked.
func (s *Source) Token(ctx context.Context, resource string) (t Token, fetched bool, err error) {
	if s.Cache == nil {
		t, err = Fetch(ctx, s.Spec, resource, s.Options)
		return t, err == nil, err
	}
	key := Key(s.Spec, resource)
	if t, ok := s.Cache.Load(key); ok && s.now().Before(t.RefreshAt()) {
		return t, false, nil
	}
	unlock, err := s.Cache.lock(ctx, key)
	if err != nil {
		return Token{}, false, err
	}
	defer unlock()
	// Another process may have fetched while this one waited.
	if t, ok := s.Cache.Load(key); ok && s.now().Before(t.RefreshAt()) {
		return t, false, nil
	}
	if t, err = Fetch(ctx, s.Spec, resource, s.Options); err != nil {
		return Token{}, true, err
	}
	// A token that cannot be cached still serves this call.
	_ = s.Cache.Store(key, t)
	return t, true, nil
}

// Transport signs each request with a token for Resource from Source:
// the agent's own API client uses the credential the kubelet uses.
type Transport struct {
	Source   *Source
	Resource string
	Base     http.RoundTripper
}

func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, _, err := t.Source.Token(r.Context(), t.Resource)
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r2)
}

package machineapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/Azure/aks-flex-node/internal/identity"
)

// TokenSource hands out tokens for a resource: identity.Source (cached
// in the state dir like the kubelet's) in the product.
type TokenSource interface {
	Token(ctx context.Context, resource string) (t identity.Token, fetched bool, err error)
}

// tokenPolicy signs each request with a token for the ARM audience, and
// only requests to the ARM endpoint's host over https: a URL from an
// answer (Azure-AsyncOperation, nextLink) that points elsewhere gets no
// token and no request.
type tokenPolicy struct {
	src      *memoSource
	audience string
	host     string
	identity string
}

func (p *tokenPolicy) Do(req *policy.Request) (*http.Response, error) {
	u := req.Raw().URL
	if u.Scheme != "https" || !strings.EqualFold(u.Host, p.host) {
		return nil, errNoRetry{fmt.Errorf("refusing to send %s's token to %s://%s: only https://%s is Azure Resource Manager here", p.identity, u.Scheme, u.Host, p.host)}
	}
	tok, err := p.src.token(req.Raw().Context(), strings.TrimRight(p.audience, "/"))
	if err != nil {
		return nil, errNoRetry{fmt.Errorf("token for %s: %w", p.audience, err)}
	}
	req.Raw().Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return req.Next()
}

// memoSource keeps the last token in memory until its RefreshAt: a
// registration's requests share one token even where the source caches
// none (start, which may not write before registration succeeds).
type memoSource struct {
	src TokenSource
	mu  sync.Mutex
	tok identity.Token
	res string
}

func (m *memoSource) token(ctx context.Context, resource string) (identity.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.res == resource && m.tok.AccessToken != "" && time.Now().Before(m.tok.RefreshAt()) {
		return m.tok, nil
	}
	t, _, err := m.src.Token(ctx, resource)
	if err != nil {
		return t, err
	}
	m.tok, m.res = t, resource
	return t, nil
}

// Package kubeapi owns the few raw calls aks-flex-node makes to a
// Kubernetes API server before it has a kubeconfig: is the server there
// with this CA, and who does it say this bootstrap token is.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client talks to one API server, verifying it with the cluster CA.
type Client struct {
	Server string // https://host:port
	HTTP   *http.Client
}

// New returns a client that trusts only the given CA certificates.
func New(server string, caPEM []byte, timeout time.Duration) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in caCertData")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:               nil, // an API server on the host's own network must not go through a proxy
		TLSHandshakeTimeout: timeout,
	}
	return &Client{Server: strings.TrimRight(server, "/"), HTTP: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// ErrUntrusted means TLS verification failed: the server is there but its
// certificate does not chain to the configured CA.
var ErrUntrusted = errors.New("the API server's certificate is not signed by the configured CA (node.kubelet.caCertData)")

// Reachable succeeds when the server answers any HTTP request over TLS
// verified with the CA: even a 401 or 403 proves it is the right server.
func (c *Client) Reachable(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return classify(c.Server, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return nil
}

func classify(server string, err error) error {
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &uerr), errors.As(err, &cerr):
		return fmt.Errorf("%s: %w", server, ErrUntrusted)
	case errors.As(err, &herr):
		return fmt.Errorf("%s: the API server's certificate does not name this host: %v", server, herr)
	}
	return fmt.Errorf("%s is unreachable: %w", server, err)
}

// ErrTokenRejected means the API server did not accept the bearer token.
var ErrTokenRejected = errors.New("the API server rejected the bootstrap token")

// UserInfo is who the API server says a credential is.
type UserInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// WhoAmI asks the server who the bearer token is (SelfSubjectReview,
// authentication.k8s.io/v1). The token never appears in errors.
func (c *Client) WhoAmI(ctx context.Context, token string) (UserInfo, error) {
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Server+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	if err != nil {
		return UserInfo{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return UserInfo{}, classify(c.Server, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return UserInfo{}, ErrTokenRejected
	case resp.StatusCode/100 != 2:
		return UserInfo{}, fmt.Errorf("SelfSubjectReview: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var review struct {
		Status struct {
			UserInfo UserInfo `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return UserInfo{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	return review.Status.UserInfo, nil
}

// CheckBootstrapToken verifies the server knows the token as
// system:bootstrap:<id>, the identity the TLS bootstrap relies on.
func (c *Client) CheckBootstrapToken(ctx context.Context, token string) error {
	id, _, _ := strings.Cut(token, ".")
	ui, err := c.WhoAmI(ctx, token)
	if errors.Is(err, ErrTokenRejected) {
		return fmt.Errorf("%w %s (is the bootstrap-token-%s Secret in kube-system, unexpired?)", ErrTokenRejected, id, id)
	}
	if err != nil {
		return err
	}
	if want := "system:bootstrap:" + id; ui.Username != want {
		return fmt.Errorf("the API server knows the token as %q, want %q", ui.Username, want)
	}
	return nil
}

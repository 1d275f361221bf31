// Package apiprobe owns the few raw calls aks-flex-node makes to a
// Kubernetes API server before it has a kubeconfig (is the server there
// with this CA, who does it say this credential is, what may it do, does
// a Node of this name exist) and the one HTTP client they go through. Preflight and
// the agent both use it, so both trust and route the same way.
package apiprobe

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
	"net/url"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

// Client talks to one API server.
type Client struct {
	Server string // https://host:port
	HTTP   *http.Client
}

// New returns a client that trusts only the given CA certificates, as the
// kubelet will: a host that reaches the API server only through the
// system trust store would pass a check here and fail after join.
func New(server string, caPEM []byte, timeout time.Duration) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in caCertData")
	}
	return newClient(server, pool, timeout), nil
}

// NewSystemTrust returns a client that verifies the server with the
// system trust store: for a config without node.kubelet.caCertData, whose
// CA is learned from Azure at start.
func NewSystemTrust(server string, timeout time.Duration) *Client {
	return newClient(server, nil, timeout)
}

func newClient(server string, roots *x509.CertPool, timeout time.Duration) *Client {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		// The one proxy rule: none. The kubelet in the machine reaches
		// the API server directly (nothing gives it a proxy), so a check
		// through a proxy would vouch for a path the node never takes.
		Proxy:               nil,
		TLSHandshakeTimeout: timeout,
	}
	return &Client{Server: strings.TrimRight(server, "/"), HTTP: &http.Client{Transport: tr, Timeout: timeout}}
}

// send is the one way a request leaves: as the product
// (buildinfo.UserAgent), like the node's client, so the server's audit
// log names the agent on these calls too.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	req.Header.Set("User-Agent", buildinfo.UserAgent())
	return c.HTTP.Do(req)
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
	resp, err := c.send(req)
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

// maxBody bounds what is read of an answer.
const maxBody = 1 << 20

// Do sends one request to Server+path, with bearer as the token when it is
// set and body as JSON when it is not nil, and returns the status and up
// to 1 MiB of the answer. A transport error comes back as it is, without
// the url.Error wrapping that repeats the method and URL callers name
// already, so a caller can tell the CA, the name and the network apart.
func (c *Client) Do(ctx context.Context, method, path, bearer string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.send(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, data, nil
}

// UserInfo is who the API server says a credential is.
type UserInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// SelfSubjectReviewPath is where SelfSubjectReview is served
// (authentication.k8s.io/v1, Kubernetes 1.28 and later).
const SelfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// SelfSubjectReview asks the server who token is. code is the HTTP status
// (0 when the request failed); the user is read from a 2xx answer, and an
// answer that does not parse is an error with that status. The token never
// appears in errors.
func (c *Client) SelfSubjectReview(ctx context.Context, token string) (code int, user UserInfo, err error) {
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	code, data, err := c.Do(ctx, http.MethodPost, SelfSubjectReviewPath, token, body)
	if err != nil || code/100 != 2 {
		return code, UserInfo{}, err
	}
	var review struct {
		Status struct {
			UserInfo UserInfo `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return code, UserInfo{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	return code, review.Status.UserInfo, nil
}

// SelfSubjectAccessReviewPath is where SelfSubjectAccessReview is served.
const SelfSubjectAccessReviewPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

// ResourceAttributes is what a SelfSubjectAccessReview asks about.
type ResourceAttributes struct {
	Namespace   string `json:"namespace,omitempty"`
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
}

// SelfSubjectAccessReview asks the server whether token may do a. code is
// the HTTP status (0 when the request failed); allowed and the reason are
// read from a 2xx answer.
func (c *Client) SelfSubjectAccessReview(ctx context.Context, token string, a ResourceAttributes) (code int, allowed bool, reason string, err error) {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "SelfSubjectAccessReview",
		"spec":       map[string]any{"resourceAttributes": a},
	})
	if err != nil {
		return 0, false, "", err
	}
	code, data, err := c.Do(ctx, http.MethodPost, SelfSubjectAccessReviewPath, token, body)
	if err != nil || code/100 != 2 {
		return code, false, "", err
	}
	var review struct {
		Status struct {
			Allowed bool   `json:"allowed"`
			Reason  string `json:"reason"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return code, false, "", fmt.Errorf("SelfSubjectAccessReview: %w", err)
	}
	return code, review.Status.Allowed, review.Status.Reason, nil
}

// Package fakeimds is the Azure Instance Metadata Service as far as the
// tests need it: GET /metadata/instance/compute/userData?format=text with
// the "Metadata: true" header (400 without it, as IMDS answers), the
// userData base64-encoded in the body; the managed identity endpoint
// (Identity); and the Azure Arc agent's identity endpoint with its
// challenge (Arc). IMDS cannot be reached from here, so this speaks its
// documented wire protocol instead; tests serve it only on loopback or
// inside a network namespace they made, at the link-local address where
// the product looks for it.
package fakeimds

import (
	"encoding/base64"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// Handler answers userData requests with userData and counts the ones it
// answered in hits (which may be nil).
func Handler(userData []byte, hits *atomic.Int32) http.Handler {
	return HandlerWithIdentity(userData, hits, nil)
}

// HandlerWithIdentity is Handler that also serves identity's token
// endpoint (nil: none, as on a VM without managed identities).
func HandlerWithIdentity(userData []byte, hits *atomic.Int32, identity *Identity) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata") != "true" {
			http.Error(w, `{"error":"Bad request. Required metadata header not specified"}`, http.StatusBadRequest)
			return
		}
		if r.URL.Path == TokenPath && identity != nil {
			identity.ServeHTTP(w, r)
			return
		}
		if r.URL.Path != "/metadata/instance/compute/userData" || r.URL.Query().Get("format") != "text" {
			http.NotFound(w, r)
			return
		}
		if hits != nil {
			hits.Add(1)
		}
		_, _ = w.Write([]byte(base64.StdEncoding.EncodeToString(userData)))
	})
}

// Serve serves userData on l until the test ends and returns the base URL
// to give the product (--imds-endpoint) and the count of answered requests.
func Serve(t testing.TB, l net.Listener, userData []byte) (string, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := &http.Server{Handler: Handler(userData, &hits)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String(), &hits
}

// ServeHandler serves h on l until the test ends.
func ServeHandler(t testing.TB, l net.Listener, h http.Handler) {
	t.Helper()
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// Package transport owns the one policy for everything aks-flex-node
// fetches over the network: the worker image registry, the bundle
// registry, the upstream release downloads and agent-upgrade --url (and
// scripts/install.sh applies the same rule with curl). It decides which
// URLs may be reached and how: https; plain HTTP only to loopback or to
// the one host a config key or flag names. It owns the time bounds of
// every request (connect, TLS handshake, response header, progress of the
// body, overall) and the size caps of what is read. Hashing while a fetch
// streams belongs to the consumer, which knows the digest to expect.
package transport

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Policy is how one source may be reached. The zero value is the default
// for every source: https, plain HTTP only to loopback, DefaultLimits.
type Policy struct {
	// PlainHTTPHost is the one host[:port] that plain HTTP is allowed to
	// besides loopback, because the config said so (OptIn). It is the
	// host of the configured reference only: a redirect or a foreign
	// layer URL to another plain-HTTP host is still refused. "" allows
	// none.
	PlainHTTPHost string
	// OptIn names the config key or flag that allows plain HTTP for this
	// source; refusals name it. "" means there is no opt-in (agent-upgrade
	// --url, upstream downloads).
	OptIn string
	// Limits bound each request; a zero field takes DefaultLimits'.
	Limits Limits
}

// IsLoopback reports whether host (a host, host:port or [v6]:port) is
// "localhost" or a loopback address. Plain HTTP to it never leaves the
// machine; the dialer checks that the name really resolved to loopback.
func IsLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PlainHTTPAllowed reports whether the policy lets plain HTTP reach host
// (host[:port]): loopback always, PlainHTTPHost when it is set.
func (p Policy) PlainHTTPAllowed(host string) bool {
	return IsLoopback(host) || p.PlainHTTPHost != "" && sameHost(host, p.PlainHTTPHost)
}

// sameHost compares two host[:port] forms, an absent port being the plain
// HTTP one.
func sameHost(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		if h, port, err := net.SplitHostPort(s); err == nil && port == "80" {
			return h
		}
		return s
	}
	return norm(a) == norm(b)
}

// Allow checks u against the policy: nil for https, and for plain HTTP to
// a host PlainHTTPAllowed accepts; a *RefusedError otherwise.
func (p Policy) Allow(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "https":
		return nil
	case "http":
		if p.PlainHTTPAllowed(u.Host) {
			return nil
		}
	}
	return &RefusedError{URL: u.Redacted(), Scheme: u.Scheme, Host: u.Host, OptIn: p.OptIn}
}

// RefusedError is a URL the policy does not let the agent reach. Its
// message names https, the host, and the opt-in when there is one.
type RefusedError struct {
	URL, Scheme, Host string
	// OptIn is the config key or flag that would allow plain HTTP.
	OptIn string
}

func (e *RefusedError) Error() string {
	if !strings.EqualFold(e.Scheme, "http") {
		return fmt.Sprintf("refusing %s: scheme %q is not https (only https is fetched; plain http only from loopback)", e.URL, e.Scheme)
	}
	msg := fmt.Sprintf("refusing plain HTTP to %s (%s): only https is fetched, plain HTTP only from loopback", e.Host, e.URL)
	if e.OptIn == "" {
		return msg + "; use an https URL"
	}
	return msg + "; serve it over https, or set " + e.OptIn + " to allow plain HTTP to " + e.Host
}

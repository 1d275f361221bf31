package agentupgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/Azure/aks-flex-node/internal/transport"
)

// openCandidate opens the candidate binary from a local file or a URL. A
// URL is fetched under the transport policy: https, plain http only from
// a loopback host (a local mirror or a test server), since the checksum
// protects integrity but not what a network observer learns; bounded in
// time and to maxCandidateSize bytes.
func openCandidate(ctx context.Context, binary, rawURL string) (io.ReadCloser, string, error) {
	switch {
	case binary != "" && rawURL != "":
		return nil, "", &RefusedError{Reason: "give --binary or --url, not both"}
	case binary != "":
		f, err := os.Open(binary)
		if err != nil {
			return nil, "", &RefusedError{Reason: fmt.Sprintf("--binary: %v", err)}
		}
		return f, binary, nil
	case rawURL != "":
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, "", &RefusedError{Reason: fmt.Sprintf("--url: %v", err)}
		}
		if err := checkURL(u); err != nil {
			return nil, "", err
		}
		body, err := transport.Policy{}.Get(ctx, u.String(), maxCandidateSize)
		if err != nil {
			return nil, "", candidateError(u, err)
		}
		return &capped{rc: body, what: u.Redacted()}, u.Redacted(), nil
	}
	return nil, "", &RefusedError{Reason: "no candidate: give --binary PATH or --url URL"}
}

// checkURL applies the transport policy to --url before anything is sent.
func checkURL(u *url.URL) error {
	if err := (transport.Policy{}).Allow(u); err != nil {
		return &RefusedError{Reason: "--url: " + err.Error()}
	}
	return nil
}

// candidateError says what a failed download means for the upgrade: a
// refusal when the policy or the size cap stopped it (nothing changed),
// a plain failure otherwise.
func candidateError(u *url.URL, err error) error {
	var re *transport.RefusedError
	if errors.As(err, &re) {
		return &RefusedError{Reason: "--url " + u.Redacted() + ": " + re.Error()}
	}
	var tl *transport.TooLargeError
	if errors.As(err, &tl) {
		return &RefusedError{Reason: fmt.Sprintf("download %s: %v, more than an agent binary can be; nothing was changed", u.Redacted(), tl)}
	}
	return fmt.Errorf("download %s: %w", u.Redacted(), err)
}

// maxCandidateSize bounds a downloaded candidate: the agent is a few tens of
// MiB, and a server that never stops sending must not fill the lib dir's
// filesystem (which may be /opt, next to everything else).
var maxCandidateSize = transport.MaxFile

// capped names the candidate when the transport's cap stops a download
// that did not announce its length.
type capped struct {
	rc   io.ReadCloser
	what string
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	var tl *transport.TooLargeError
	if errors.As(err, &tl) {
		return n, fmt.Errorf("download %s: %w, more than an agent binary can be", c.what, tl)
	}
	return n, err
}

func (c *capped) Close() error { return c.rc.Close() }

package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// FetchError is a token request that failed: which identity asked where,
// and what the endpoint answered (its AADSTS code, when it gave one).
type FetchError struct {
	Spec   Spec
	Detail string
	// Code is the identity platform's AADSTS code ("AADSTS7000215"), or "".
	Code string
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("%s: %s", e.Spec, e.Detail)
}

// aadstsRE is compiled on first use: the plugin runs once per token.
var aadstsRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`AADSTS[0-9]+`) })

// describe says what a failed token request got back, quoting the
// endpoint's own error: an OAuth2 or IMDS error body carries "error" and
// "error_description" ("AADSTS7000215: Invalid client secret provided...").
// The identity platform's trace and correlation lines are dropped; the
// secret, should anything quote it, is redacted.
func describe(err error, s Spec) string {
	var afe *azidentity.AuthenticationFailedError
	if errors.As(err, &afe) && afe.RawResponse != nil {
		resp := afe.RawResponse
		where := ""
		if resp.Request != nil {
			u := *resp.Request.URL
			u.RawQuery = ""
			where = " from " + u.String()
		}
		msg := fmt.Sprintf("HTTP %d%s", resp.StatusCode, where)
		body, _ := runtime.Payload(resp)
		var oe struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
			Message     string `json:"message"`
		}
		switch {
		case json.Unmarshal(body, &oe) == nil && (oe.Error != "" || oe.Description != ""):
			msg += ": " + oe.Error
			if d := firstLine(oe.Description); d != "" {
				msg += ": " + d
			}
		case len(body) > 0:
			msg += ": " + firstLine(string(body))
		}
		return redact(msg, s)
	}
	return redact(oneLine(err.Error()), s)
}

// oneLine joins a multi-line error (MSAL's put the cause on a line of its
// own) into one, without azidentity's troubleshooting links.
func oneLine(msg string) string {
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "To troubleshoot, visit") || strings.Trim(l, "-") == "" {
			continue
		}
		parts = append(parts, l)
	}
	return firstLine(strings.Join(parts, " "))
}

// fetchErrorCode fills e.Code from its detail.
func fetchErrorCode(e *FetchError) *FetchError {
	e.Code = aadstsRE().FindString(e.Detail)
	return e
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	const max = 400
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// redact keeps s's secrets out of a message.
func redact(msg string, s Spec) string {
	if s.ClientSecret != "" {
		msg = strings.ReplaceAll(msg, s.ClientSecret, "<redacted>")
	}
	return msg
}

// redactErr is for errors that name nothing secret but may quote input.
func redactErr(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "-----BEGIN"); i >= 0 {
		msg = msg[:i] + "<redacted>"
	}
	return msg
}

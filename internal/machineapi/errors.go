package machineapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error is a failed call of the machine API: what was asked of which
// resource, as whom, and ARM's answer (status, error.code, error.message),
// plus the Machine's status.provisioningError when an operation failed.
type Error struct {
	Op         string // GET, PUT, LIST, or "operation" for a failed LRO
	ResourceID string
	// Identity names the identity that asked (no secrets).
	Identity string
	Status   int
	Code     string
	Message  string
	// State is the operation's final status (Failed, Canceled) for an
	// operation that ended without success.
	State             string
	ProvisioningError *ErrorDetail
	// Needs names the permissions the call needs, for a 403's remedy;
	// "" is the machine API's (machines read and write).
	Needs string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Op, e.ResourceID)
	switch {
	case e.State != "":
		fmt.Fprintf(&b, ": operation %s", e.State)
	case e.Status != 0:
		fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Code != "" {
		b.WriteString(": " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + oneLine(e.Message))
	}
	if pe := e.ProvisioningError; pe != nil && (pe.Code != "" || pe.Message != "") {
		fmt.Fprintf(&b, "; the Machine's status.provisioningError: %s: %s", pe.Code, oneLine(pe.Message))
	}
	switch {
	case e.Identity == "":
	case e.Status == http.StatusUnauthorized:
		fmt.Fprintf(&b, " (asked as %s: ARM did not accept its token; check that the identity is of the cluster's tenant and that azure.cloud or azure.resourceManagerEndpoint names this ARM)", e.Identity)
	case e.Status == http.StatusForbidden:
		needs := e.Needs
		if needs == "" {
			needs = "Microsoft.ContainerService/managedClusters/agentPools/machines/read and write"
		}
		fmt.Fprintf(&b, " (asked as %s: grant it a role on the cluster that allows %s)", e.Identity, needs)
	}
	return b.String()
}

// IsNotFound says err is ARM's 404.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsPreconditionFailed says err is ARM's 412: the eTag moved.
func IsPreconditionFailed(err error) bool { return statusOf(err) == http.StatusPreconditionFailed }

// Code is ARM's error.code of err, "" if none.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// envelope is ARM's error envelope; an operation's status document has
// the same "error" next to its "status".
type envelope struct {
	Status string       `json:"status"`
	Error  *ErrorDetail `json:"error"`
}

// readEnvelope reads an ARM error envelope from body; a body that is not
// one yields its first line as the message.
func readEnvelope(body io.Reader) (status string, d ErrorDetail) {
	data, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	var env envelope
	if err := json.Unmarshal(data, &env); err == nil && env.Error != nil {
		return env.Status, *env.Error
	} else if err == nil {
		return env.Status, d
	}
	d.Message = oneLine(string(data))
	return "", d
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

package daemon

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/transport"
)

// busy is an error that changed nothing and passes once another command
// (or the recovery of an interrupted repave) is done with the node.
func busy(err error) bool {
	var held *nodelock.HeldError
	return errors.As(err, &held) || errors.Is(err, lifecycle.ErrStateMoved) || errors.Is(err, lifecycle.ErrRepaveInFlight)
}

// stageError is a failed staging as the rollout reports it: the reason
// said in CamelCase (DiskFull, ChecksumMismatch, ImageNotFound,
// RegistryUnreachable, PreflightRefused, StageFailed).
func stageError(err error) error {
	if busy(err) {
		return fmt.Errorf("%w: %w", fleet.ErrBusy, err)
	}
	return &fleet.StepError{Step: fleet.StepStage, Reason: fetchReason(err, "StageFailed"), Err: err}
}

// fetchReason names why fetching or verifying the release failed, from
// the error's types where the code has them and from its text where it
// comes from a registry or a preflight report; def otherwise.
func fetchReason(err error, def string) string {
	msg := strings.ToLower(err.Error())
	var mismatch *artifact.MismatchError
	var timeout *transport.TimeoutError
	var netErr net.Error
	var refused *lifecycle.RefusedError
	switch {
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(msg, "no space left on device") || refusedFor(err, preflight.NameDiskSpace, preflight.NameStagingSpace):
		return "DiskFull"
	case errors.As(err, &mismatch) || (strings.Contains(msg, "sha256") && (strings.Contains(msg, "!=") || strings.Contains(msg, "mismatch"))):
		return "ChecksumMismatch"
	case strings.Contains(msg, "manifest_unknown") || strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "name_unknown"):
		return "ImageNotFound"
	case errors.As(err, &timeout) || errors.As(err, &netErr) || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "tls:"):
		return "RegistryUnreachable"
	case errors.As(err, &refused):
		return "PreflightRefused"
	}
	return def
}

// refusedFor is whether err is a preflight refusal with a failed check
// among names.
func refusedFor(err error, names ...string) bool {
	var refused *lifecycle.RefusedError
	if !errors.As(err, &refused) {
		return false
	}
	for _, c := range refused.Failed {
		if slices.Contains(names, c.Name) {
			return true
		}
	}
	return false
}

// switchError is a failed repave as the rollout reports it, by the phase
// it failed in: a refusal or a failure to stage before the drain is the
// stage step's; a drain that did not finish (DrainTimeout) or refused
// (DrainRefused) the drain step's; a switch that rolled back
// (RolledBack) or failed after the new side served the switch step's.
func switchError(err error, phase string) error {
	if busy(err) {
		return fmt.Errorf("%w: %w", fleet.ErrBusy, err)
	}
	var rolledBack *lifecycle.RolledBackError
	var refused *drain.RefusedError
	switch {
	case errors.As(err, &rolledBack):
		return &fleet.StepError{Step: fleet.StepSwitch, Reason: "RolledBack", Err: err}
	case phase == "" || phase == lifecycle.PreflightPhase || phase == lifecycle.StagePhase || phase == lifecycle.PreparePhase:
		return &fleet.StepError{Step: fleet.StepStage, Reason: fetchReason(err, "StageFailed"), Err: err}
	case phase == fleet.StepDrain && errors.As(err, &refused):
		return &fleet.StepError{Step: fleet.StepDrain, Reason: "DrainRefused", Err: err}
	case phase == fleet.StepDrain:
		// The drain's one other way to fail: pods still there at its
		// bound (the error names them).
		return &fleet.StepError{Step: fleet.StepDrain, Reason: "DrainTimeout", Err: err}
	}
	return &fleet.StepError{Step: fleet.StepSwitch, Reason: "SwitchFailed", Err: err}
}

// Package cli owns the aks-flex-node command line: one file per command,
// their flags, their output and their exit codes.
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/progress"
)

// Exit codes are part of the interface: scripts branch on them.
const (
	ExitOK      = 0
	ExitFailure = 1 // runtime failure
	ExitInvalid = 2 // invalid input or usage
)

// exitError carries the exit code chosen where the failure was understood.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func invalid(err error) error { return &exitError{code: ExitInvalid, err: err} }

func invalidf(format string, args ...any) error { return invalid(fmt.Errorf(format, args...)) }

// ExitCode maps an error returned by Execute to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ie *config.InvalidError
	if errors.As(err, &ie) {
		return ExitInvalid
	}
	var pe *layout.PrefixError
	if errors.As(err, &pe) {
		return ExitInvalid
	}
	// cobra reports an unknown subcommand as a plain error; it is usage.
	if strings.HasPrefix(err.Error(), "unknown command ") {
		return ExitInvalid
	}
	return ExitFailure
}

// Main runs the CLI with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err != nil {
		var ee *exitError
		if !(errors.As(err, &ee) && ee.err == errSilent) {
			fmt.Fprintf(stderr, "aks-flex-node: %v\n", err)
		}
	}
	return ExitCode(err)
}

// errSilent marks a failure whose explanation the command already printed.
var errSilent = errors.New("failed")

// NewRootCommand builds the command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "aks-flex-node",
		Short: "Join a customer-managed Linux host to an AKS cluster and keep it healthy",
		Long: `aks-flex-node turns a Linux host (including image-based hosts such as Azure
Container Linux, where /usr is read-only) into a worker node of an AKS cluster.

Agent-owned files live under the install prefix declared in the config
(agent.hostPrefix); with no prefix they live under /usr/local.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// completion is our own command (completion.go): bash, zsh and fish,
	// in its group and under the argument rule like every other.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Flag parse errors are usage errors: exit 2, not 1.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return invalidf("%v (see '%s --help')", err, c.CommandPath())
	})
	addGroups(root)
	applyArgsRule(root)
	return root
}

func checkOutput(format string) error {
	switch format {
	case "text", "json":
		return nil
	}
	return invalidf("--output %q: must be text or json", format)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// logger builds the slog logger for a command: text on a terminal, plain
// key=value lines under systemd (journald adds its own timestamps).
func logger(w io.Writer, level slog.Level) *slog.Logger { return progress.Logger(w, level) }

// levelOf maps agent.logLevel to a slog level.
func levelOf(c *config.Config) slog.Level {
	switch c.Agent.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

package hostos

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs a command on the host: systemctl, machinectl, nsenter,
// modprobe. Every package that runs host commands takes one, so tests and
// image baking replace them all the same way. It returns the command's
// standard output, also on failure, so callers can read states that come
// with a non-zero exit (systemctl is-system-running); the error names the
// command line and carries its standard error.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Exec is the Runner that runs commands with os/exec.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return out, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}

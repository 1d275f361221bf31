package machine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// Control starts, stops and enters machines on the running host through
// machinectl, systemctl and nsenter. The zero value is ready to use.
type Control struct {
	// Run runs machinectl, systemctl and nsenter; nil means hostos.Exec.
	Run hostos.Runner
	// Poll is how often state is re-read while waiting; 0 means 500ms.
	Poll time.Duration
	// StopTimeout bounds the clean poweroff before the machine is
	// terminated; 0 means 90s, what a machine waiting on pod processes
	// was measured to need.
	StopTimeout time.Duration
	// EscalateTimeout bounds each wait after terminate and after SIGKILL;
	// 0 means 30s.
	EscalateTimeout time.Duration
}

func (c *Control) escalateTimeout() time.Duration {
	if c.EscalateTimeout > 0 {
		return c.EscalateTimeout
	}
	return 30 * time.Second
}

func (c *Control) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if c.Run != nil {
		return c.Run(ctx, name, args...)
	}
	return hostos.Exec(ctx, name, args...)
}

func (c *Control) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return 500 * time.Millisecond
}

// Start boots machine name (machinectl start, which starts
// systemd-nspawn@<name>.service).
func (c *Control) Start(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if _, err := c.run(ctx, "machinectl", "start", name); err != nil {
		return fmt.Errorf("start machine %s: %w", name, err)
	}
	return nil
}

// State is the ActiveState of systemd-nspawn@<name>.service: active,
// activating, deactivating, inactive or failed. An unknown unit is
// inactive.
func (c *Control) State(ctx context.Context, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	out, err := c.run(ctx, "systemctl", "show", ServiceName(name), "-p", "ActiveState")
	if err != nil {
		return "", fmt.Errorf("state of machine %s: %w", name, err)
	}
	s := strings.TrimPrefix(trimOutput(out), "ActiveState=")
	if s == "" {
		return "", fmt.Errorf("state of machine %s: systemctl show printed no ActiveState", name)
	}
	return s, nil
}

func stopped(state string) bool { return state == "inactive" || state == "failed" }

// Stop shuts machine name down: machinectl poweroff, a bounded wait for
// the unit to go inactive, then machinectl terminate, then SIGKILL to
// every process of the machine's unit, each with a bounded wait. A stopped
// machine is left alone.
func (c *Control) Stop(ctx context.Context, name string) error {
	st, err := c.State(ctx, name)
	if err != nil {
		return err
	}
	if stopped(st) {
		return nil
	}
	timeout := c.StopTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	// poweroff fails when the machine has not registered yet; terminate
	// below covers that.
	_, poweroffErr := c.run(ctx, "machinectl", "poweroff", name)
	if poweroffErr == nil {
		err := c.waitStopped(ctx, name, timeout)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stop machine %s: %w", name, err)
		}
	}
	if _, err := c.run(ctx, "machinectl", "terminate", name); err != nil {
		// It may have stopped between the last poll and terminate.
		if st, serr := c.State(ctx, name); serr == nil && stopped(st) {
			return nil
		}
		return fmt.Errorf("stop machine %s: %w", name, errors.Join(poweroffErr, err))
	}
	termErr := c.waitStopped(ctx, name, c.escalateTimeout())
	if termErr == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop machine %s: terminated but %w", name, termErr)
	}
	return c.kill(ctx, name, termErr)
}

// kill is the last step of Stop: SIGKILL to every process of the
// machine's unit. A process that ignores SIGTERM as PID 1 of a container
// in the machine (busybox httpd does) keeps systemd-nspawn deactivating
// for the machine's own stop timeout; reset and repave must not fail on
// it, and the kubelet's pods were drained or are being removed anyway.
func (c *Control) kill(ctx context.Context, name string, termErr error) error {
	if _, err := c.run(ctx, "systemctl", "kill", "--kill-whom=all", "--signal=SIGKILL", ServiceName(name)); err != nil {
		if st, serr := c.State(ctx, name); serr == nil && stopped(st) {
			return nil
		}
		return fmt.Errorf("stop machine %s: terminated but %w; SIGKILL: %w", name, termErr, err)
	}
	if err := c.waitStopped(ctx, name, c.escalateTimeout()); err != nil {
		return fmt.Errorf("stop machine %s: killed but %w", name, err)
	}
	return nil
}

func (c *Control) waitStopped(ctx context.Context, name string, timeout time.Duration) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, c.poll(), timeout, true, func(ctx context.Context) (bool, error) {
		st, err := c.State(ctx, name)
		if err != nil {
			return false, nil // a failed look is retried at the next poll
		}
		last = st
		return stopped(st), nil
	})
	if err != nil {
		return fmt.Errorf("still %s after %s", last, timeout)
	}
	return nil
}

// Leader is the host PID of the machine's init.
func (c *Control) Leader(ctx context.Context, name string) (int, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	out, err := c.run(ctx, "machinectl", "show", name, "-p", "Leader", "--value")
	if err != nil {
		return 0, fmt.Errorf("leader of machine %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("leader of machine %s: machinectl printed %q", name, strings.TrimSpace(string(out)))
	}
	return pid, nil
}

// Exec runs args inside machine name by entering all namespaces of its
// leader with nsenter. Unlike machinectl shell it does not need the
// machine's D-Bus, so it works while the machine is still booting.
func (c *Control) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("exec: no command")
	}
	pid, err := c.Leader(ctx, name)
	if err != nil {
		return nil, err
	}
	out, err := c.run(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("in machine %s: %w", name, err)
	}
	return out, nil
}

// WaitRunning waits up to timeout for the machine's systemd to finish
// booting, and returns its state: running, or degraded (some unit failed;
// the caller decides whether that matters). Until the machine has a leader
// and its systemd answers, it retries.
func (c *Control) WaitRunning(ctx context.Context, name string, timeout time.Duration) (string, error) {
	var lastErr error
	last := ""
	errStopping := errors.New("shutting down")
	err := wait.PollUntilContextTimeout(ctx, c.poll(), timeout, true, func(ctx context.Context) (bool, error) {
		out, err := c.Exec(ctx, name, "systemctl", "is-system-running", "--wait")
		st := ""
		if len(bytes.TrimSpace(out)) > 0 {
			st = trimOutput(out)
		}
		if st != "" {
			last = st
		}
		lastErr = err
		switch st {
		case "running", "degraded":
			return true, nil
		case "stopping":
			return false, errStopping
		}
		return false, nil
	})
	switch {
	case err == nil:
		return last, nil
	case errors.Is(err, errStopping):
		return last, fmt.Errorf("machine %s is shutting down", name)
	default:
		return last, fmt.Errorf("machine %s not running after %s (last state %q): %w", name, timeout, last, errors.Join(err, lastErr))
	}
}

var defaultControl = &Control{}

// Start boots machine name with the default Control.
func Start(ctx context.Context, name string) error { return defaultControl.Start(ctx, name) }

// Stop powers machine name off with the default Control.
func Stop(ctx context.Context, name string) error { return defaultControl.Stop(ctx, name) }

// State reads machine name's unit state with the default Control.
func State(ctx context.Context, name string) (string, error) { return defaultControl.State(ctx, name) }

// Leader is the host PID of machine name's init, via the default Control.
func Leader(ctx context.Context, name string) (int, error) { return defaultControl.Leader(ctx, name) }

// Exec runs args inside machine name with the default Control.
func Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return defaultControl.Exec(ctx, name, args...)
}

// WaitRunning waits for machine name to boot with the default Control.
func WaitRunning(ctx context.Context, name string, timeout time.Duration) (string, error) {
	return defaultControl.WaitRunning(ctx, name, timeout)
}

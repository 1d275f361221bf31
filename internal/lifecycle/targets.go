package lifecycle

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
)

// Host is what the tasks that change the host act on: the layout on its
// root, the proc tree that describes it, how host commands run, and the
// tracker that records what start creates. It holds no result of any
// task.
type Host struct {
	Layout  layout.Layout
	ProcDir string // default /proc
	Exec    Runner // nil runs commands for real
	Tracker *Tracker
}

func (h Host) procDir() string {
	if h.ProcDir != "" {
		return h.ProcDir
	}
	return "/proc"
}

func (h Host) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if h.Exec != nil {
		return h.Exec(ctx, name, args...)
	}
	return execRunner(ctx, name, args...)
}

func (h Host) track(paths ...string) error { return h.Tracker.Add(paths...) }

// Machine is the node's machine as the tasks see it: its name, its rootfs
// and how to control and enter it.
type Machine struct {
	Layout  layout.Layout
	Name    string
	Control *machine.Control
	// monotonic reads the clock systemd in the machine stamps unit starts
	// with; nil reads the host's CLOCK_MONOTONIC, which the machine shares
	// (nspawn gives it no time namespace). Tests set a clock of a host up
	// long enough for the start they fake, whatever this host's uptime.
	monotonic func() (time.Duration, error)
}

// NewMachine is machine name of l, controlled through run (nil runs
// machinectl and systemctl for real).
func NewMachine(l layout.Layout, name string, run Runner) Machine {
	c := &machine.Control{}
	if run != nil {
		c.Run = run
	}
	return Machine{Layout: l, Name: name, Control: c}
}

// Root is the machine's rootfs, as this process opens it.
func (m Machine) Root() string { return machine.Dir(m.Layout, m.Name) }

// monotonicNow is the time since boot on the machine's monotonic clock.
func (m Machine) monotonicNow() (time.Duration, error) {
	if m.monotonic != nil {
		return m.monotonic()
	}
	return hostMonotonic()
}

// hostMonotonic reads the host's CLOCK_MONOTONIC.
func hostMonotonic() (time.Duration, error) {
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return 0, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	return time.Duration(now.Nano()), nil
}

func (m Machine) exec(ctx context.Context, args ...string) ([]byte, error) {
	return m.Control.Exec(ctx, m.Name, args...)
}

// logHint says where to look when a step inside the machine hangs.
func (m Machine) logHint(unit string) string {
	return fmt.Sprintf("its log: journalctl -D %s/var/log/journal -u %s (or, inside: machinectl shell %s)", m.Layout.MachineDir(m.Name), unit, m.Name)
}

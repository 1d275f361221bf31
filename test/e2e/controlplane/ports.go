package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// startAttempts bounds how often start picks new ports after a component
// lost one of its ports to another process.
const startAttempts = 3

// startOnFreePorts runs start, and runs it again on newly picked ports
// when a component could not bind the port picked for it. A port is
// picked free and released for the component to bind (the components
// take ports as flags, not listeners), so on a busy machine another
// process can take it in between: another test picking ports the same
// way, or any outgoing connection, whose source port the kernel draws
// from the same range. That component exits at once; the run is thrown
// away and started again, so the race costs seconds, not the test.
func (c *ControlPlane) startOnFreePorts(ctx context.Context, opts *Options) error {
	for attempt := 1; ; attempt++ {
		err := c.start(ctx, opts)
		if err == nil || attempt == startAttempts {
			return err
		}
		lost := c.lostPort()
		if lost == "" {
			return err
		}
		opts.Logf("controlplane: %s could not bind its port (another process took it after it was picked); starting again on new ports (attempt %d of %d)", lost, attempt+1, startAttempts)
		if err := c.discardAttempt(attempt); err != nil {
			return fmt.Errorf("start again after %s lost its port: %w", lost, err)
		}
	}
}

// lostPort names the component that exited because its port was taken,
// or is "".
func (c *ControlPlane) lostPort() string {
	for _, p := range c.procs {
		if done, _ := p.exited(); done && strings.Contains(p.tail(16<<10), "address already in use") {
			return p.name
		}
	}
	return ""
}

// discardAttempt stops what the failed attempt started and clears what
// the next attempt must not inherit: etcd's data (its member records the
// old peer URL). The attempt's logs are kept next to the new ones.
func (c *ControlPlane) discardAttempt(attempt int) error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.procs[i].stop())
	}
	for _, p := range c.procs {
		errs = append(errs, os.Rename(p.logFile, fmt.Sprintf("%s.attempt%d", p.logFile, attempt)))
	}
	c.procs = nil
	errs = append(errs, os.RemoveAll(filepath.Join(c.WorkDir, "etcd")))
	return errors.Join(errs...)
}

// freePorts picks a free TCP port on each of hosts. All listeners stay
// open until every port is chosen so no two picks collide; another
// process can still take one before the component binds it, which
// startOnFreePorts recovers from.
func freePorts(hosts ...string) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for _, host := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

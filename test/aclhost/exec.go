package aclhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// innerEnv is the environment commands run with inside: the test binary's
// own (GOPATH, TMPDIR, ...) has no business there.
var innerEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"TERM=dumb",
	"SYSTEMD_PAGER=",
	"SYSTEMD_COLORS=0",
	// preflight, start and host inspect ask IMDS for the VM's userData; a
	// test host has no business asking anything but what the test set up
	// (tests that want it point this at a fake with `env`).
	"AKS_FLEX_NODE_IMDS_ENDPOINT=off",
}

// Command returns a command that runs args inside the host, in all of its
// namespaces (mount, UTS, IPC, network, PID, cgroup) and its root.
func (h *Host) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"-t", strconv.Itoa(h.leader), "-a", "--"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	cmd.Env = innerEnv
	cmd.Dir = "/"
	// nsenter forks to enter the PID namespace; kill the whole group on
	// cancellation or the inner process outlives the context.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs args inside the host. A non-zero exit is an error that names the
// command and carries its stderr; errors.As finds the *exec.ExitError.
func (h *Host) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return h.run(ctx, nil, args...)
}

func (h *Host) run(ctx context.Context, stdin io.Reader, args ...string) (string, string, error) {
	if h.leader == 0 {
		return "", "", errors.New("aclhost: host has no running init")
	}
	select {
	case <-h.stopped:
		return "", "", fmt.Errorf("aclhost: host %s is stopped", h.name)
	default:
	}
	var out, errb bytes.Buffer
	cmd := h.Command(ctx, args...)
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %q: %w: %s", h.name, args, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// RunOK runs args inside the host and fails tb unless they succeed.
func (h *Host) RunOK(tb testing.TB, args ...string) string {
	tb.Helper()
	out, _, err := h.Run(context.Background(), args...)
	if err != nil {
		tb.Fatalf("%v\nstdout:\n%s", err, out)
	}
	return out
}

// Shell runs script with /bin/sh -e inside the host.
func (h *Host) Shell(ctx context.Context, script string) (stdout, stderr string, err error) {
	return h.Run(ctx, "/bin/sh", "-ec", script)
}

// ShellOK is Shell that fails tb unless the script succeeds.
func (h *Host) ShellOK(tb testing.TB, script string) string {
	tb.Helper()
	out, _, err := h.Shell(context.Background(), script)
	if err != nil {
		tb.Fatalf("%v\nstdout:\n%s", err, out)
	}
	return out
}

package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit on SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// process is one running component, its output going to a log file.
type process struct {
	name    string
	logFile string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // valid once done is closed
}

func startProcess(name, binary, logsDir string, args []string) (*process, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("start %s: %w (build it with test/e2e/build-k8s.sh)", name, err)
	}
	logFile := filepath.Join(logsDir, name+".log")
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer func() { _ = f.Close() }()
	fmt.Fprintf(f, "+ %s %q\n", binary, args)

	cmd := exec.Command(binary, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	// Pdeathsig: a test binary that dies without running Stop must not leave
	// a control plane behind holding ports and memory.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logFile: logFile, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.err == nil {
			return true, fmt.Errorf("%s exited with status 0", p.name)
		}
		return true, fmt.Errorf("%s exited: %w", p.name, p.err)
	default:
		return false, nil
	}
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for exit. An
// exit caused by our own signal is not an error.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s; killed", p.name, p.cmd.Process.Pid, stopGrace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) still running after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// waitFor polls check until it succeeds, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("wait for %s: %w (log %s)", what, err, p.logFile)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w; last error: %v (log %s)", what, ctx.Err(), last, p.logFile)
		case <-tick.C:
		}
	}
}

// tail returns up to max bytes from the end of the process's log.
func (p *process) tail(max int64) string {
	f, err := os.Open(p.logFile)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return err.Error()
		}
	}
	b, err := io.ReadAll(f)
	if err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	return string(b)
}

// httpCheck succeeds when GET url answers 200 with a body containing want.
func httpCheck(client *http.Client, url, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: %s: %.500s", url, resp.Status, body)
		}
		return nil
	}
}

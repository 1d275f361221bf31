package buildcache

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// RunLogged runs cmd with its output going to log, echoing to logf the lines
// that start with prefix and otherwise one line every 15 s, so a build of a
// few minutes does not look hung. Cancelling cmd's context kills its whole
// process group (debootstrap forks, and its children hold the mounts).
func RunLogged(cmd *exec.Cmd, log io.Writer, logf Logf, prefix string) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if strings.HasPrefix(line, prefix) || time.Since(last) > 15*time.Second {
				logf.Printf("  %s", line)
				last = time.Now()
			}
		}
		io.Copy(io.Discard, pr) //nolint:errcheck // drain so the writer never blocks
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	return err
}

// TailFile returns the last n lines of the file at path.
func TailFile(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

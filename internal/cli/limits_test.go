package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mainArgsEnv makes the test binary run Main with these JSON-encoded args
// and exit with its code: a config that crashes the runtime (a stack
// overflow is fatal, not a panic) must fail one test, not the whole run.
const mainArgsEnv = "CLI_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(mainArgsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			panic(err)
		}
		os.Exit(Main(args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runChild runs Main in a child process, bounded in time.
func runChild(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(a))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not finish in 30s", args)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// A config nested too deep, or too large, is refused with exit 2 and one
// line naming the limit, by every command that reads a config; it used to
// kill the binary with a Go stack overflow (a few MB of '[').
func TestConfigDepthAndSizeLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deep := write("deep.json", strings.Repeat("[", 1<<20-1))
	big := write("big.json", strings.Repeat("[", 4<<20))
	nested := write("nested.json", `{"agent": {"nodeName": `+strings.Repeat("[", 31)+strings.Repeat("]", 31)+`}}`)
	cases := []struct {
		file, want string
	}{
		{deep, "objects and lists nested more than 32 deep; a config document is at most 32 levels deep (line 1, column 33)"},
		{nested, "agent.nodeName[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: objects and lists nested more than 32 deep; a config document is at most 32 levels deep (line 1, column 54)"},
		{big, "the file is 4194304 bytes; a config document is at most 1048576 bytes (1 MiB)"},
	}
	for _, tc := range cases {
		for _, args := range [][]string{{"config", "validate"}, {"config", "view"}, {"start"}, {"reset"}, {"agent"}, {"status"}} {
			_, stderr, code := runChild(t, append(args, "--config", tc.file)...)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != ExitInvalid || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[0], tc.file) {
				t.Errorf("%s %s: exit %d, want 2 and one line naming %s and %q:\n%.2000s", strings.Join(args, " "), filepath.Base(tc.file), code, tc.file, tc.want, stderr)
			}
		}
	}
}

// A FIFO in the config's place is refused at once instead of blocking
// the reader for ever.
func TestConfigMustBeARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "config.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "validate"}, {"start"}} {
		_, stderr, code := runChild(t, append(args, "--config", fifo)...)
		if code != ExitFailure || !strings.Contains(stderr, fifo+": not a regular file") {
			t.Errorf("%v on a FIFO: exit %d: %s", args, code, stderr)
		}
	}
}

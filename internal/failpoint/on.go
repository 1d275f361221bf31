//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Enabled reports whether this build acts on failpoints.
const Enabled = true

// baked is set with -ldflags -X in test builds of deliberately bad agents.
var baked string

// Hit acts on the failpoint set for step, if any. It returns true only for
// the "skip" action: the caller then leaves the step out.
func Hit(step string) bool {
	action := ""
	for _, spec := range strings.Split(baked+","+os.Getenv(EnvPoints), ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(spec), ":")
		if ok && name == step {
			action = act
		}
	}
	if action == "" {
		return false
	}
	if dir := os.Getenv(EnvDir); dir != "" {
		fired := filepath.Join(dir, step+".fired")
		if _, err := os.Stat(fired); err == nil {
			return false
		}
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(fired, nil, 0o644)
		_ = os.WriteFile(filepath.Join(dir, step+".reached"), []byte(fmt.Sprint(os.Getpid())), 0o644)
		syncDir(dir)
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: %s\n", step, action)
	switch action {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		sleepForever()
	case "exit1":
		os.Exit(1)
	case "hang":
		sleepForever()
	case "skip":
		return true
	default:
		fmt.Fprintf(os.Stderr, "failpoint %s: unknown action %q\n", step, action)
		os.Exit(3)
	}
	return false
}

// sleepForever blocks without tripping the runtime's deadlock detector.
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
}

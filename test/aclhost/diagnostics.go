package aclhost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/buildcache"
)

func (h *Host) consoleLog() string { return filepath.Join(h.dir, "console.log") }

func (h *Host) consoleTail(n int) string {
	s, err := buildcache.TailFile(h.consoleLog(), n)
	if err != nil {
		return ""
	}
	return "console:\n" + s
}

// Journal returns the host's journal for this boot; after the host stopped,
// it reads the persistent journal files from the upper dir instead.
func (h *Host) Journal(ctx context.Context) string {
	select {
	case <-h.exited:
	default:
		out, _, err := h.Run(ctx, "journalctl", "-b", "--no-pager", "-o", "short-monotonic")
		if err == nil {
			return out
		}
	}
	out, err := exec.CommandContext(ctx, "journalctl", "-D", filepath.Join(h.upper, "var/log/journal"),
		"--no-pager", "-o", "short-monotonic").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("journalctl -D %s: %v\n%s", h.upper, err, out)
	}
	return string(out)
}

// DumpDiagnostics writes the journal, failed units and console output to
// tb's log and, if AKS_FLEX_NODE_TEST_ARTIFACTS is set, to files under
// $AKS_FLEX_NODE_TEST_ARTIFACTS/<test>/<machine>/.
func (h *Host) DumpDiagnostics(tb testing.TB) {
	h.dumpTo(tb.Logf, tb)
}

func (h *Host) dumpTo(logf func(string, ...any), tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	files := map[string]string{"journal.txt": h.Journal(ctx)}
	if h.leader != 0 {
		failed, _, _ := h.Run(ctx, "systemctl", "--failed", "--no-pager")
		files["failed-units.txt"] = failed
	}
	if b, err := os.ReadFile(h.consoleLog()); err == nil {
		files["console.txt"] = string(b)
	}
	if ch, err := h.ChangeSet(); err == nil {
		var b strings.Builder
		for _, c := range ch {
			fmt.Fprintln(&b, c)
		}
		files["changes.txt"] = b.String()
	}
	for _, name := range []string{"failed-units.txt", "journal.txt", "console.txt"} {
		if s, ok := files[name]; ok {
			logf("==== %s %s ====\n%s", h.name, name, s)
		}
	}
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		return
	}
	test := "no-test"
	if tb != nil {
		test = strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	}
	dir = filepath.Join(dir, test, h.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("artifacts: %v", err)
		return
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			logf("artifacts: %v", err)
		}
	}
	logf("artifacts for %s in %s", h.name, dir)
}

package join

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// demoMode is `make demo`: the acl scenario shows what a user sees, the
// product's own output under a heading per step, on stdout (the Makefile
// keeps the test runner's lines out of the way).
func demoMode() bool { return os.Getenv("AKS_FLEX_NODE_DEMO") == "1" }

// step is a demo heading.
func step(format string, args ...any) {
	if demoMode() {
		fmt.Printf("\n==> "+format+"\n", args...)
	}
}

// demoShow runs args on the host as a user would type them, and shows
// the command and its output.
func (e *env) demoShow(h *aclhost.Host, args ...string) {
	if !demoMode() {
		return
	}
	fmt.Printf("$ %s\n", strings.Join(args, " "))
	out, stderr, err := h.Run(e.ctx, args...)
	fmt.Print(out, stderr)
	if err != nil {
		fmt.Printf("(%v)\n", err)
	}
}

// demoStart runs start on a terminal (script(1) gives it a pty), so the
// demo shows the progress display, live; it returns what it printed.
func (e *env) demoStart(h *aclhost.Host, agent string) (string, error) {
	fmt.Printf("$ %s start\n", agent)
	var b bytes.Buffer
	cmd := h.Command(e.ctx, "script", "-q", "-e", "-c", "TERM=xterm "+agent+" start --join-timeout 2m", "/dev/null")
	cmd.Stdout = io.MultiWriter(os.Stdout, &b)
	cmd.Stderr = cmd.Stdout
	err := cmd.Run()
	return b.String(), err
}

package hostos

import (
	"context"
	"strings"
	"testing"
)

// TestExecSplitsOutput: stdout is returned, also on failure (callers read
// states that come with a non-zero exit); the error names the command line
// and carries stderr, which never mixes into what callers parse.
func TestExecSplitsOutput(t *testing.T) {
	out, err := Exec(context.Background(), "sh", "-c", "echo state; echo why >&2; exit 3")
	if string(out) != "state\n" {
		t.Errorf("stdout = %q", out)
	}
	if err == nil {
		t.Fatal("exit 3 was not an error")
	}
	for _, want := range []string{"sh -c echo state;", "exit status 3", ": why"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	out, err = Exec(context.Background(), "sh", "-c", "echo ok; echo noise >&2")
	if err != nil || string(out) != "ok\n" {
		t.Errorf("success: %q %v", out, err)
	}
	if _, err := Exec(context.Background(), "/nonexistent/tool", "x"); err == nil || !strings.Contains(err.Error(), "/nonexistent/tool x") {
		t.Errorf("missing binary: %v", err)
	}
}

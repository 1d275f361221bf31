//go:build failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSkipFiresOnceWithADir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvPoints, "other:kill,step:skip")
	t.Setenv(EnvDir, dir)
	if !Hit("step") {
		t.Fatal("skip did not fire")
	}
	if _, err := os.Stat(filepath.Join(dir, "step.reached")); err != nil {
		t.Fatal(err)
	}
	if Hit("step") {
		t.Fatal("fired twice with a marker dir")
	}
	if Hit("unset") {
		t.Fatal("an unset step fired")
	}
}

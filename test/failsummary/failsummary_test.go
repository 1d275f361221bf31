// Package failsummary tests failures.sh, the summary `make test` prints
// last when something failed, against real go test output.
package failsummary

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module whose tests fail in the ways the e2e tests do: a subtest
// that logs a lot around its error, a nested subtest that stops, a
// parent whose cleanup logs after its subtests, a test with none.
const failingTests = `package failing

import (
	"fmt"
	"testing"
)

func TestOuter(t *testing.T) {
	t.Cleanup(func() { t.Log("agent journal:\nline one\nline two") })
	t.Run("passes", func(t *testing.T) { t.Log("fine") })
	t.Run("fails", func(t *testing.T) {
		for i := range 20 {
			t.Logf("node: Updating since %d", i)
		}
		t.Errorf("steps seen [agent soak]: want agent before switch")
		t.Log("node: Updated")
	})
	t.Run("deep", func(t *testing.T) {
		t.Run("leaf", func(t *testing.T) { t.Fatal(fmt.Errorf("start: exit status 1")) })
	})
}

func TestAlone(t *testing.T) {
	t.Log("setting up")
	t.Fatalf("the Node never turned Ready: timed out after 2m0s")
}

func TestFine(t *testing.T) {}
`

const passingTests = `package failing

import "testing"

func TestFine(t *testing.T) { t.Log("fine") }
`

// goTestOutput runs go test on a module made of src and returns what it
// printed (it fails when src's tests do: that is not an error here).
func goTestOutput(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/failing\n\ngo 1.26\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "failing_test.go"), []byte(src), 0o644))
	cmd := exec.Command("go", "test", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	log := filepath.Join(t.TempDir(), "test.log")
	must(t, os.WriteFile(log, out, 0o644))
	return log
}

func summary(t *testing.T, logs ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"failures.sh"}, logs...)...).Output()
	return string(out), err
}

func TestSummaryNamesEachFailedTestAndItsError(t *testing.T) {
	got, err := summary(t, goTestOutput(t, failingTests))
	if err != nil {
		t.Fatalf("failures.sh: %v", err)
	}
	t.Logf("summary:\n%s", got)
	for _, want := range []string{
		"failed:\n",
		"  TestOuter/fails (",
		"failing_test.go:15: steps seen [agent soak]: want agent before switch",
		"  TestOuter/deep/leaf (",
		"start: exit status 1",
		"  TestAlone (",
		"the Node never turned Ready: timed out after 2m0s",
		"FAIL\texample.test/failing",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary has no %q", want)
		}
	}
	// Parents are named by their failed subtests; passing tests, and a
	// parent's cleanup log, are not in it.
	for _, unwanted := range []string{"--- FAIL: TestOuter (", "  TestOuter (", "  TestOuter/deep (", "passes", "TestFine", "agent journal", "line one"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the summary has %q", unwanted)
		}
	}
	// At most three lines of a test's log: the error and the two latest
	// that look like failures or, failing that, the latest.
	if n := strings.Count(got, "node: Updat"); n > 2 {
		t.Errorf("%d of TestOuter/fails's log lines in the summary, want the error and at most 2 others", n)
	}
}

func TestSummaryOfAPassingRunIsEmpty(t *testing.T) {
	got, err := summary(t, goTestOutput(t, passingTests))
	if err != nil || got != "" {
		t.Fatalf("failures.sh of a passing run: %q, %v; want nothing", got, err)
	}
}

func TestSummaryWithoutALogIsAUsageError(t *testing.T) {
	_, err := summary(t)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("failures.sh without a log: %v, want exit status 2", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package genfile_test

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

var update = flag.Bool("update", false, "rewrite golden files")

// hostCase is one host: its prefix and its machine settings.
type hostCase struct {
	prefix  string
	machine machine.Options
}

// The default layout on a cgroup v1 hybrid host (this build machine), and
// ACL's declared prefix on a cgroup v2 host with an extra device.
var hostCases = map[string]hostCase{
	"default": {"", machine.Options{CgroupMode: hostos.CgroupHybrid}},
	"opt":     {layout.SuggestedPrefix, machine.Options{CgroupMode: hostos.CgroupV2, AdditionalHostDevices: []string{"/dev/fuse"}}},
}

// hostFiles renders every generated host file through the package that owns
// it, keyed by the host path it is written to. The files inside the machine
// are golden-tested the same way in internal/node (testdata/<case>/...).
func hostFiles(t *testing.T, c hostCase) map[string]string {
	t.Helper()
	l, err := layout.New("/", c.prefix, "")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	add := func(path string, text string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		files[path] = text
	}
	text, err := systemd.AgentUnit(l)
	add(l.Units().Agent, text, err)
	text, err = systemd.FirstBootUnit(l)
	add(l.FirstBootUnit(), text, err)
	text, err = agentupgrade.RenderRecoveryUnit(l)
	add(l.Units().Recovery, text, err)
	text, err = agentupgrade.RenderRecoveryTimer()
	add(l.RecoveryTimerUnit(), text, err)
	text, err = agentupgrade.RenderRecoveryScript(l)
	add(l.RecoveryScript(), text, err)
	text, err = machine.NspawnFile(c.machine)
	add(l.NspawnFile(layout.MachineBlue), text, err)
	text, err = machine.DropIn(c.machine)
	add(l.MachineDropIn(layout.MachineBlue), text, err)
	b, err := genfile.Render(genfile.Sysctl, lifecycle.Sysctls)
	add(l.SysctlDropIn(), string(b), err)
	b, err = genfile.Render(genfile.ModulesLoad, lifecycle.RequiredModules)
	add(l.ModulesLoadFile(), string(b), err)
	return files
}

// TestHostFilesGolden compares every generated host file with
// testdata/<case>/<host path>; go test -update rewrites them. The golden
// tree is the list of files aks-flex-node generates on a host, as written.
func TestHostFilesGolden(t *testing.T) {
	for name, c := range hostCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			files := hostFiles(t, c)
			for path, text := range files {
				if !strings.HasPrefix(text, genfile.Header) && !strings.HasPrefix(text, "#!/bin/bash\n"+genfile.Header) {
					t.Errorf("%s does not start with the generated-file header", path)
				}
				checkGolden(t, filepath.Join(dir, path), []byte(text))
			}
			// A golden file nothing renders any more is a stale expectation.
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				if _, ok := files["/"+filepath.ToSlash(rel)]; !ok {
					t.Errorf("golden file %s is not rendered", p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

package lifecycle

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/hostos"
)

// Host preparation: what the host kernel must provide for a node running in
// a machine that shares its network namespace.

// RequiredModules are loaded on the host: the machine cannot load modules.
var RequiredModules = hostos.RequiredModuleNames()

// Sysctls a node needs; written to a drop-in so they survive reboots.
var Sysctls = [][2]string{
	{"net.ipv4.ip_forward", "1"},
	{"net.bridge.bridge-nf-call-iptables", "1"},
	{"net.bridge.bridge-nf-call-ip6tables", "1"},
	// The kubelet's container manager insists on these and writes them
	// itself when they differ; inside the machine /proc/sys is read-only
	// outside net.*, so the host sets them first and the kubelet finds
	// nothing to change.
	{"vm.overcommit_memory", "1"},
	{"kernel.panic", "10"},
	{"kernel.panic_on_oops", "1"},
}

// Runner executes host commands; tests replace it.
type Runner = hostos.Runner

func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// loadedModules reads /proc/modules and modules.builtin.
func loadedModules(procDir string) map[string]bool {
	out := map[string]bool{}
	if data, err := os.ReadFile(filepath.Join(procDir, "modules")); err == nil {
		s := bufio.NewScanner(bytes.NewReader(data))
		for s.Scan() {
			if f := strings.Fields(s.Text()); len(f) > 0 {
				out[f[0]] = true
			}
		}
	}
	if rel, err := os.ReadFile(filepath.Join(procDir, "sys/kernel/osrelease")); err == nil {
		if data, err := os.ReadFile("/lib/modules/" + strings.TrimSpace(string(rel)) + "/modules.builtin"); err == nil {
			for _, l := range strings.Split(string(data), "\n") {
				out[strings.TrimSuffix(filepath.Base(l), ".ko")] = true
			}
		}
	}
	// A module compiled into the kernel shows up in /sys/module, and a
	// kernel without module support (no /proc/modules) has only built-in
	// code: look for what each module provides instead.
	for _, m := range RequiredModules {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			out[m] = true
		}
	}
	if data, err := os.ReadFile(filepath.Join(procDir, "filesystems")); err == nil && bytes.Contains(data, []byte("\toverlay\n")) {
		out["overlay"] = true
	}
	if _, err := os.Stat(filepath.Join(procDir, "sys/net/bridge/bridge-nf-call-iptables")); err == nil {
		out["br_netfilter"] = true
	}
	return out
}

// modulesLoadFile is the modules-load.d file that loads RequiredModules at
// boot.
func modulesLoadFile() ([]byte, error) { return genfile.Render(genfile.ModulesLoad, RequiredModules) }

// sysctlFile is the sysctl.d drop-in that sets Sysctls at boot.
func sysctlFile() ([]byte, error) { return genfile.Render(genfile.Sysctl, Sysctls) }

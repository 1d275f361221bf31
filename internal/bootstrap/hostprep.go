package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/genfile"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/task"
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

func (p *Pipeline) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if p.Exec != nil {
		return p.Exec(ctx, name, args...)
	}
	return execRunner(ctx, name, args...)
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

func (p *Pipeline) kernelModulesTask() task.Task {
	return task.Func{N: "load-kernel-modules", F: func(ctx context.Context) (task.Result, error) {
		text, err := genfile.Render(genfile.ModulesLoad, RequiredModules)
		if err != nil {
			return task.Result{}, err
		}
		changed, err := fsutil.WriteFile(p.Layout.OnRoot(p.Layout.ModulesLoadFile()), text, 0o644)
		if err != nil {
			return task.Result{}, err
		}
		if err := p.track(p.Layout.ModulesLoadFile()); err != nil {
			return task.Result{}, err
		}
		loaded := loadedModules(p.procDir())
		var missing []string
		for _, m := range RequiredModules {
			if loaded[m] {
				continue
			}
			if out, err := p.run(ctx, "modprobe", m); err != nil {
				missing = append(missing, fmt.Sprintf("%s (%v: %s)", m, err, bytes.TrimSpace(out)))
				continue
			}
			changed = true
		}
		if len(missing) > 0 {
			return task.Result{Changed: changed}, fmt.Errorf("kernel modules not available: %s", strings.Join(missing, ", "))
		}
		return task.Result{Changed: changed}, nil
	}}
}

func (p *Pipeline) sysctlTask() task.Task {
	return task.Func{N: "apply-sysctls", F: func(ctx context.Context) (task.Result, error) {
		text, err := genfile.Render(genfile.Sysctl, Sysctls)
		if err != nil {
			return task.Result{}, err
		}
		changed, err := fsutil.WriteFile(p.Layout.OnRoot(p.Layout.SysctlDropIn()), text, 0o644)
		if err != nil {
			return task.Result{}, err
		}
		if err := p.track(p.Layout.SysctlDropIn()); err != nil {
			return task.Result{}, err
		}
		for _, kv := range Sysctls {
			path := filepath.Join(p.procDir(), "sys", strings.ReplaceAll(kv[0], ".", "/"))
			cur, err := os.ReadFile(path)
			if err != nil {
				return task.Result{Changed: changed}, fmt.Errorf("sysctl %s: %w", kv[0], err)
			}
			if strings.TrimSpace(string(cur)) == kv[1] {
				continue
			}
			if err := os.WriteFile(path, []byte(kv[1]), 0o644); err != nil {
				return task.Result{Changed: changed}, fmt.Errorf("sysctl %s=%s: %w", kv[0], kv[1], err)
			}
			changed = true
		}
		return task.Result{Changed: changed}, nil
	}}
}

func (p *Pipeline) swapOffTask() task.Task {
	return task.Func{N: "disable-swap", F: func(ctx context.Context) (task.Result, error) {
		data, err := os.ReadFile(filepath.Join(p.procDir(), "swaps"))
		if err != nil {
			return task.Result{}, fmt.Errorf("read swaps: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) <= 1 {
			return task.Result{}, nil
		}
		if out, err := p.run(ctx, "swapoff", "-a"); err != nil {
			return task.Result{}, fmt.Errorf("swapoff -a: %v: %s", err, bytes.TrimSpace(out))
		}
		return task.Result{Changed: true, Detail: fmt.Sprintf("%d swap device(s) off", len(lines)-1)}, nil
	}}
}

func (p *Pipeline) layoutDirsTask() task.Task {
	return task.Func{N: "create-layout-dirs", F: func(ctx context.Context) (task.Result, error) {
		changed := false
		for _, d := range p.Layout.Dirs() {
			path := p.Layout.OnRoot(d)
			if _, err := os.Stat(path); err == nil {
				continue
			}
			if err := p.track(d); err != nil {
				return task.Result{}, err
			}
			if err := fsutil.MkdirAll(path, 0o755); err != nil {
				return task.Result{Changed: changed}, err
			}
			changed = true
			if se := hostos.DetectSELinux(p.Layout.Root()); se.Mode == "enforcing" || se.Mode == "permissive" {
				if out, err := p.run(ctx, "restorecon", "-R", path); err != nil {
					return task.Result{Changed: true}, fmt.Errorf("restorecon %s: %v: %s", d, err, bytes.TrimSpace(out))
				}
			}
		}
		return task.Result{Changed: changed}, nil
	}}
}

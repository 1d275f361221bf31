package preflight

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestDefaultNamesMatchChecks(t *testing.T) {
	got := Names(Checks(newHost(t).env()))
	if strings.Join(got, ",") != strings.Join(DefaultNames, ",") {
		t.Fatalf("Checks names %v, DefaultNames %v", got, DefaultNames)
	}
	kebab := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, n := range got {
		if !kebab.MatchString(n) || seen[n] || n == IgnoreAll {
			t.Errorf("bad or duplicate check name %q", n)
		}
		seen[n] = true
	}
	for _, c := range Checks(newHost(t).env()) {
		if c.Target() == "" {
			t.Errorf("%s has no target", c.Name())
		}
	}
}

func TestPrivilegedUser(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameIsPrivilegedUser), SeverityOK)
	h.euid = 1000
	want(t, h.run(NameIsPrivilegedUser), SeverityError, "uid 1000", "root")
}

func TestHostOS(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameHostOS), SeverityOK, "family debian", "/etc/os-release")

	h.file("etc/os-release", "ID=azurelinux\nVERSION_ID=3.0\nVARIANT_ID=azurecontainerlinux\nPRETTY_NAME=\"Azure Container Linux 3.0\"\n")
	want(t, h.run(NameHostOS), SeverityOK, "family acl", "image-based")

	h.file("etc/os-release", "ID=plan9\nID_LIKE=bell\n")
	want(t, h.run(NameHostOS), SeverityWarning, `ID="plan9"`, "unknown")

	if err := os.Remove(filepath.Join(h.root, "etc/os-release")); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameHostOS), SeverityWarning, "os-release")
}

// preflightLeftovers lists probe dirs left anywhere under root.
func preflightLeftovers(t *testing.T, root string) []string {
	t.Helper()
	var left []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".aks-flex-node-preflight-") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

func TestHostLayoutReadOnlyUsrDefaultLayout(t *testing.T) {
	h := newHost(t)
	h.mounts(mRoot, mUsrRO, mCgroupV2)
	r := h.run(NameHostLayout)
	want(t, r, SeverityError,
		"/usr/local/bin", "/usr/local/lib/aks-flex-node",
		"/usr is mounted read-only", "/dev/sda2",
		"agent.hostPrefix is empty in "+h.configFile())
	if !strings.HasPrefix(r.Remedy, "set agent.hostPrefix, e.g. /opt/aks-flex-node") {
		t.Errorf("remedy %q does not start with the prefix to declare", r.Remedy)
	}
	if strings.Contains(r.Message, "/var/lib/aks-flex-node") || strings.Contains(r.Message, "/var/log") {
		t.Errorf("writable dirs reported as problems: %s", r.Message)
	}
	if left := preflightLeftovers(t, h.root); len(left) > 0 {
		t.Errorf("probe left %v", left)
	}

	// Declaring the prefix is the fix: same host, no error.
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	r = h.run(NameHostLayout)
	want(t, r, SeverityOK, "/opt/aks-flex-node/bin", "a test executable ran from /opt")
	if left := preflightLeftovers(t, h.root); len(left) > 0 {
		t.Errorf("probe left %v", left)
	}
}

func TestHostLayoutNeverRelocates(t *testing.T) {
	// /opt is read-only too: suggesting /opt/aks-flex-node would be a lie.
	h := newHost(t)
	h.mounts(mRoot, mUsrRO, "3 1 8:3 / /opt ro - ext4 /dev/sda3 ro", mCgroupV2)
	r := h.run(NameHostLayout)
	want(t, r, SeverityError, "/usr is mounted read-only", "would not work on this host either")
	if strings.Contains(r.Remedy, "e.g. /opt/aks-flex-node") {
		t.Errorf("remedy suggests a prefix that fails here: %s", r.Remedy)
	}
}

func TestHostLayoutNoexec(t *testing.T) {
	h := newHost(t)
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	h.mounts(mRoot, "3 1 8:3 / /opt rw,noexec - ext4 /dev/sda3 rw", mCgroupV2)
	want(t, h.run(NameHostLayout), SeverityError, "/opt/aks-flex-node/bin", "/opt is mounted noexec", "agent.hostPrefix")

	// noexec only matters where executables live.
	h.mounts(mRoot, "4 1 8:4 / /var rw,noexec - ext4 /dev/sda4 rw", mCgroupV2)
	want(t, h.run(NameHostLayout), SeverityOK)
}

func TestHostLayoutStateAndLogDirs(t *testing.T) {
	h := newHost(t)
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	h.mounts(mRoot, "4 1 8:4 / /var ro - ext4 /dev/sda4 ro", mCgroupV2)
	r := h.run(NameHostLayout)
	want(t, r, SeverityError, "/var/lib/aks-flex-node", "/var/log/aks-flex-node", "/var is mounted read-only", "agent.logDir")
	if strings.Contains(r.Remedy, "set agent.hostPrefix") {
		t.Errorf("remedy blames the prefix for /var: %s", r.Remedy)
	}
}

func TestHostLayoutExecProbe(t *testing.T) {
	h := newHost(t)
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	env := h.env()
	var ran string
	env.RunExecutable = func(ctx context.Context, p string) error {
		ran = p
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "#!/bin/sh\nexit 0\n" {
			t.Errorf("probe %s: %q %v", p, b, err)
		}
		return errors.New("permission denied")
	}
	r := runNamed(t, env, NameHostLayout)
	want(t, r, SeverityError, "a test executable created in /opt could not be run", "permission denied", "agent.hostPrefix")
	if !strings.HasPrefix(ran, filepath.Join(h.root, "opt")+"/") {
		t.Errorf("probe ran %q, want it under the nearest existing ancestor of the bin dir", ran)
	}
	if left := preflightLeftovers(t, h.root); len(left) > 0 {
		t.Errorf("probe left %v after failing", left)
	}

	// The real thing: the script is executed by the kernel.
	env = h.env()
	var real string
	env.RunExecutable = nil
	env.setDefaults()
	inner := env.RunExecutable
	env.RunExecutable = func(ctx context.Context, p string) error { real = p; return inner(ctx, p) }
	want(t, runNamed(t, env, NameHostLayout), SeverityOK)
	if real == "" {
		t.Error("probe executable was not run")
	}
	if _, err := os.Stat(filepath.Dir(real)); !os.IsNotExist(err) {
		t.Errorf("probe dir %s still there: %v", filepath.Dir(real), err)
	}
}

func TestHostLayoutSysextOverOpt(t *testing.T) {
	h := newHost(t)
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	// A mutable sysext overlay: writable, but files under it do not survive a refresh.
	h.mounts(mRoot, "5 1 0:40 / /opt rw,relatime - overlay sysext rw,lowerdir=/run/systemd/sysext/meta/opt:/opt,upperdir=/var/lib/extensions.mutable/opt", mCgroupV2)
	want(t, h.run(NameHostLayout), SeverityWarning, "systemd-sysext overlay at /opt", "agent.hostPrefix")

	// The default layout is not under /opt, so the overlay is not its business.
	h.set("agent.hostPrefix", nil)
	want(t, h.run(NameHostLayout), SeverityOK)
}

func TestHostPackages(t *testing.T) {
	tools := []string{"systemd-nspawn", "machinectl", "nsenter", "mount", "iptables", "ip", "modprobe"}
	t.Run("package manager installs what is missing", func(t *testing.T) {
		h := newHost(t)
		h.exec("usr/bin/apt-get")
		h.file("var/lib/dpkg/status", "")
		h.exec("usr/bin/nsenter")
		r := h.run(NameHostPackages)
		want(t, r, SeverityOK, "apt-get", "systemd-container (for systemd-nspawn, machinectl)", "iproute2 (for ip)")
	})
	t.Run("no package manager, all tools present", func(t *testing.T) {
		h := newHost(t)
		for _, tool := range tools {
			h.exec("usr/bin/" + tool)
		}
		want(t, h.run(NameHostPackages), SeverityOK, "no package manager", "/usr/bin/systemd-nspawn", "/usr/bin/iptables")
	})
	t.Run("nft stands in for iptables", func(t *testing.T) {
		h := newHost(t)
		for _, tool := range tools {
			if tool != "iptables" {
				h.exec("usr/sbin/" + tool)
			}
		}
		h.exec("usr/sbin/nft")
		want(t, h.run(NameHostPackages), SeverityOK, "/usr/sbin/nft")
	})
	t.Run("no package manager, tools missing", func(t *testing.T) {
		h := newHost(t)
		for _, tool := range []string{"systemd-nspawn", "nsenter", "mount", "ip", "modprobe"} {
			h.exec("usr/bin/" + tool)
		}
		r := h.run(NameHostPackages)
		want(t, r, SeverityError, "missing: machinectl, iptables or nft", "present: /usr/bin/systemd-nspawn", "no package manager")
		if strings.Contains(r.Message, "nsenter,") && strings.Contains(r.Message, "missing: nsenter") {
			t.Errorf("present tool reported missing: %s", r.Message)
		}
	})
	t.Run("package manager without its database", func(t *testing.T) {
		h := newHost(t)
		h.exec("usr/bin/tdnf")
		r := h.run(NameHostPackages)
		want(t, r, SeverityError, "no usable package manager", "rpm database")
	})
}

func TestSystemd(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameSystemd), SeverityOK, "systemd is PID 1", "/etc/systemd/system writable")

	h.procFile("1/comm", "bash\n")
	want(t, h.run(NameSystemd), SeverityError, `PID 1 is "bash", not systemd`, h.proc)

	h.procFile("1/comm", "systemd\n")
	h.mounts(mRoot, "6 1 8:6 / /etc ro - ext4 /dev/sda6 ro", mCgroupV2)
	want(t, h.run(NameSystemd), SeverityError, "/etc/systemd/system", "/etc is mounted read-only")

	h.mounts(mRoot, mCgroupV2)
	if err := os.Remove(filepath.Join(h.root, "usr/lib/systemd/systemd")); err != nil {
		t.Fatal(err)
	}
	want(t, h.run(NameSystemd), SeverityError, "systemd not found")
}

func TestCgroups(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameCgroups), SeverityOK, "cgroup v2")

	h.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory\n")
	want(t, h.run(NameCgroups), SeverityError, "missing: pids", "cgroup.controllers")

	hybrid := []string{mRoot,
		"30 1 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755",
		"31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
		"34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
		"38 30 0:35 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
		"40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
	}
	h.mounts(hybrid...)
	want(t, h.run(NameCgroups), SeverityWarning, "cgroup hybrid", "failCgroupV1")

	h.mounts(hybrid[:4]...)
	want(t, h.run(NameCgroups), SeverityError, "cgroup v1", "missing: pids")

	h.mounts(mRoot)
	want(t, h.run(NameCgroups), SeverityError, "no cgroup filesystem is mounted at /sys/fs/cgroup")
}

func TestSwap(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameSwap), SeverityOK, "swap off")
	h.procFile("swaps", "Filename\tType\tSize\tUsed\tPriority\n/swapfile                               file\t\t2097148\t\t0\t\t-2\n")
	want(t, h.run(NameSwap), SeverityWarning, "swap is on", "/swapfile", "start turns it off", "/etc/fstab")
	h.rmProc("swaps")
	want(t, h.run(NameSwap), SeverityOK, "does not exist")
}

func TestKernelModules(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameKernelModules), SeverityOK, "overlay loaded", "br_netfilter loaded")

	// Built in, per modules.builtin.
	h.procFile("modules", "")
	h.file("lib/modules/6.8.0-test/modules.builtin", "kernel/fs/overlayfs/overlay.ko\nkernel/net/bridge/br_netfilter.ko\n")
	want(t, h.run(NameKernelModules), SeverityOK, "overlay built in", "br_netfilter built in")

	// Available as a module file: start loads it; preflight does not.
	h.file("lib/modules/6.8.0-test/modules.builtin", "kernel/fs/overlayfs/overlay.ko\n")
	h.file("lib/modules/6.8.0-test/kernel/net/bridge/br_netfilter.ko.zst", "")
	want(t, h.run(NameKernelModules), SeverityOK, "br_netfilter will be loaded by start (/lib/modules/6.8.0-test/kernel/net/bridge/br_netfilter.ko.zst)")

	// modules.dep, when present, is the index.
	h.file("lib/modules/6.8.0-test/modules.dep", "kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz\n")
	want(t, h.run(NameKernelModules), SeverityOK, "br_netfilter.ko.xz")

	// Nowhere.
	if err := os.RemoveAll(filepath.Join(h.root, "lib/modules/6.8.0-test/kernel")); err != nil {
		t.Fatal(err)
	}
	h.file("lib/modules/6.8.0-test/modules.dep", "")
	want(t, h.run(NameKernelModules), SeverityError, "br_netfilter: not loaded", "/lib/modules/6.8.0-test", "6.8.0-test")

	// The running kernel says it has it, though no file says so.
	h.procFile("sys/net/bridge/bridge-nf-call-iptables", "1\n")
	want(t, h.run(NameKernelModules), SeverityOK, "br_netfilter available")
}

func TestDiskSpace(t *testing.T) {
	h := newHost(t)
	want(t, h.run(NameDiskSpace), SeverityOK, "100.0 GiB free", "/var/lib/machines")
	if len(h.frees) == 0 || h.frees[len(h.frees)-1] != filepath.Join(h.root, "var/lib") {
		t.Errorf("statfs asked about %v, want the nearest existing ancestor %s", h.frees, filepath.Join(h.root, "var/lib"))
	}
	h.free = 7 * GiB
	want(t, h.run(NameDiskSpace), SeverityWarning, "7.0 GiB free", "10 GiB are recommended")
	h.free = 1 * GiB
	want(t, h.run(NameDiskSpace), SeverityError, "1.0 GiB free", "at least 5 GiB")
}

func TestKernelLogDeviceCheck(t *testing.T) {
	root := t.TempDir()
	env := &Env{Root: root}
	if r := kernelLogDeviceCheck(env).Run(context.Background()); r.Severity != SeverityError || !strings.Contains(r.Message, "/dev/kmsg is missing") || r.Remedy == "" {
		t.Fatalf("missing /dev/kmsg: %+v", r)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev/kmsg"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := kernelLogDeviceCheck(env).Run(context.Background()); r.Severity != SeverityOK {
		t.Fatalf("present /dev/kmsg: %+v", r)
	}
}

package preflight

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// notProbedRemedy is the remedy for a fact that exists only on a booted
// host when preflight looked at some other tree.
const notProbedRemedy = "run preflight on the booted host"

func privilegedUserCheck(e *Env) Check {
	return NewCheck(NameIsPrivilegedUser, "effective user id", func(context.Context) Result {
		if uid := e.Geteuid(); uid != 0 {
			return Error("run aks-flex-node as root (for example with sudo)",
				"running as uid %d; installing units, machines and the agent binary needs root (euid 0)", uid)
		}
		return OK("running as root")
	})
}

func hostOSCheck(e *Env) Check {
	return NewCheck(NameHostOS, "os-release", func(context.Context) Result {
		o, file, err := hostos.ReadOSRelease(e.Root)
		if err != nil {
			return Warning("make sure the host has /etc/os-release (os-release(5)); the capability checks still ran",
				"cannot identify the distribution: %v", err)
		}
		fam := hostos.Classify(o)
		name := o.PrettyName
		if name == "" {
			name = strings.TrimSpace(o.ID + " " + o.VersionID)
		}
		kind := ""
		if fam.ImageBased() {
			kind = ", image-based"
		}
		if !fam.Supported() {
			return Warning("use a supported distribution (Azure Container Linux, Flatcar, Azure Linux, Ubuntu, Debian, RHEL family, Fedora CoreOS); the agent may work, but this host is untested",
				"%s (ID=%q ID_LIKE=%q in %s) is not a distribution this agent knows (family %s)", name, o.ID, strings.Join(o.IDLike, " "), file, fam)
		}
		return OK("%s: family %s (%s%s), from %s", name, fam, fam.Describe(), kind, file)
	})
}

// requiredTool is a host tool the agent runs on the host itself (the
// Kubernetes worker runs inside the nspawn machine and brings its own).
// Any of names satisfies it. The package names are what a package manager
// would install it from.
type requiredTool struct {
	names  []string
	deb    string
	rpm    string
	reason string
}

var requiredTools = []requiredTool{
	{[]string{"systemd-nspawn"}, "systemd-container", "systemd-container", "runs the kube machines"},
	{[]string{"machinectl"}, "systemd-container", "systemd-container", "starts and stops the kube machines"},
	{[]string{"nsenter"}, "util-linux", "util-linux", "enters the machines"},
	{[]string{"mount"}, "mount", "util-linux", "bind mounts"},
	{[]string{"iptables", "nft"}, "iptables", "iptables", "host firewall rules"},
	{[]string{"ip"}, "iproute2", "iproute", "host networking"},
	{[]string{"modprobe"}, "kmod", "kmod", "loads " + strings.Join(hostos.RequiredModuleNames(), " and ")},
}

func (t requiredTool) String() string { return strings.Join(t.names, " or ") }

func hostPackagesCheck(e *Env) Check {
	var names []string
	for _, t := range requiredTools {
		names = append(names, t.String())
	}
	return NewCheck(NameHostPackages, strings.Join(names, ", "), func(context.Context) Result {
		var present, missing []string
		var missingTools []requiredTool
		for _, t := range requiredTools {
			found := ""
			for _, n := range t.names {
				if p, ok := e.Prober.LookTool(n); ok {
					found = p
					break
				}
			}
			if found == "" {
				missing = append(missing, t.String())
				missingTools = append(missingTools, t)
			} else {
				present = append(present, found)
			}
		}
		pm := hostos.DetectPackageManager(e.Root)
		if pm.Usable {
			if len(missing) == 0 {
				return OK("all required tools present (%s); package manager %s", strings.Join(present, ", "), pm.Detail)
			}
			// Start installs these; reporting them is a courtesy, not a
			// problem, so this is never an error.
			pkgs := map[string][]string{}
			for _, t := range missingTools {
				pkg := t.rpm
				if pm.Name == "apt-get" {
					pkg = t.deb
				}
				pkgs[pkg] = append(pkgs[pkg], t.String())
			}
			var parts []string
			for _, p := range sortedKeys(pkgs) {
				parts = append(parts, fmt.Sprintf("%s (for %s)", p, strings.Join(pkgs[p], ", ")))
			}
			return OK("start will install with %s (%s): %s", pm.Name, pm.Path, strings.Join(parts, ", "))
		}
		// No package manager is a fact, not a fault: image-based hosts
		// ship without one. Only tools that are then missing are errors.
		pmState := "no package manager (" + pm.Detail + ")"
		if pm.Name != "" {
			pmState = "no usable package manager (" + pm.Detail + ")"
		}
		if len(missing) > 0 {
			return Error(fmt.Sprintf("add %s to the host image (on image-based hosts: a systemd-sysext extension or files provisioned by Ignition), then run preflight again", strings.Join(missing, ", ")),
				"%s, so the required tools must already be on the host; missing: %s (present: %s)", pmState, strings.Join(missing, ", "), orNone(strings.Join(present, ", ")))
		}
		return OK("%s; all required tools present: %s", pmState, strings.Join(present, ", "))
	})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func systemdCheck(e *Env) Check {
	unitDir := e.Layout.SystemdUnitDir()
	return NewCheck(NameSystemd, "PID 1, "+unitDir, func(ctx context.Context) Result {
		sd := e.Prober.Systemd(ctx)
		var errs []string
		switch {
		case !sd.Present:
			errs = append(errs, strings.Join(sd.Notes, "; "))
		case sd.PID1Probed && !sd.PID1:
			errs = append(errs, fmt.Sprintf("PID 1 is %q, not systemd (%s/1/comm)", sd.PID1Comm, e.procDir()))
		}
		v := e.checkLayoutDir(unitDir, false)
		if v.problem != "" {
			errs = append(errs, v.problem)
		}
		if len(errs) > 0 {
			return Error(fmt.Sprintf("run on a host booted with systemd whose %s is writable: units must live where systemd looks for them", unitDir),
				"%s", strings.Join(errs, "; "))
		}
		version := "version unknown"
		if sd.Version > 0 {
			version = fmt.Sprintf("version %d", sd.Version)
		}
		if !sd.PID1Probed {
			return Warning(notProbedRemedy, "systemd present at %s (%s) but PID 1 not probed: %s; %s writable", sd.Path, version, strings.Join(sd.Notes, "; "), unitDir)
		}
		return OK("systemd is PID 1 (%s); %s writable", version, unitDir)
	})
}

// requiredControllers are the cgroup controllers the kubelet refuses to
// run without.
var requiredControllers = []string{"cpu", "memory", "pids"}

const cgroupRoot = "/sys/fs/cgroup"

func cgroupsCheck(e *Env) Check {
	return NewCheck(NameCgroups, cgroupRoot, func(context.Context) Result {
		mounts, err := e.Prober.Mounts()
		if err != nil {
			return Warning(notProbedRemedy, "cgroup mode not probed: %v", err)
		}
		mode := hostos.CgroupMode(mounts)
		have := map[string]bool{}
		var source string
		switch mode {
		case "":
			return Error("boot the host with systemd, which mounts cgroup2 (or the v1 controllers) at "+cgroupRoot,
				"no cgroup filesystem is mounted at %s (%s)", cgroupRoot, e.Prober.MountInfoPath())
		case hostos.CgroupV2:
			source = path.Join(cgroupRoot, "cgroup.controllers")
			b, err := e.readFile(source)
			if err != nil {
				return Error("check that cgroup2 is mounted at "+cgroupRoot, "cgroup v2, but cannot read its controllers: %v", err)
			}
			for _, c := range strings.Fields(string(b)) {
				have[c] = true
			}
		default:
			source = e.Prober.MountInfoPath()
			for _, m := range mounts {
				if m.FSType != "cgroup" || !underDir(path.Clean(m.MountPoint), cgroupRoot) {
					continue
				}
				for _, o := range append(append([]string{}, m.Options...), m.SuperOptions...) {
					have[o] = true
				}
			}
		}
		var missing []string
		for _, c := range requiredControllers {
			if !have[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return Error("enable the missing controllers (kernel config, or cgroup_enable=/cgroup_no_v1= on the kernel command line)",
				"cgroup %s: required controllers missing: %s (read from %s)", mode, strings.Join(missing, ", "), source)
		}
		if mode != hostos.CgroupV2 {
			return Warning("nothing is required now (the machine follows the host's mode); boot with systemd.unified_cgroup_hierarchy=1 when you can",
				"cgroup %s with %s: Kubernetes keeps cgroup v1 in maintenance mode, and the kubelet runs with failCgroupV1: false", mode, strings.Join(requiredControllers, ", "))
		}
		return OK("cgroup %s with %s", mode, strings.Join(requiredControllers, ", "))
	})
}

// kernelLogDeviceCheck: the machine binds /dev/kmsg from the host because
// the kubelet reads the kernel log from it. Without it systemd-nspawn refuses
// to start the machine ("Failed to stat /dev/kmsg"), after start has already
// written the machine's files, so it is caught here instead.
func kernelLogDeviceCheck(e *Env) Check {
	return NewCheck(NameKernelLogDevice, "/dev/kmsg", func(context.Context) Result {
		if _, err := e.stat("/dev/kmsg"); err != nil {
			return Error("run on a host that has /dev/kmsg; inside a container, bind it in (systemd-nspawn --bind=/dev/kmsg, docker --device /dev/kmsg)",
				"/dev/kmsg is missing (%v): the machine kube1 binds it for the kubelet, and systemd-nspawn will not start the machine without it", err)
		}
		return OK("/dev/kmsg present")
	})
}

func swapCheck(e *Env) Check {
	return NewCheck(NameSwap, "/proc/swaps", func(context.Context) Result {
		pd := e.procDir()
		if pd == "" {
			return Warning(notProbedRemedy, "swap not probed: %v", hostos.ErrLiveHostOnly)
		}
		file := filepath.Join(pd, "swaps")
		f, err := os.Open(file)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// No /proc/swaps: the kernel was built without swap.
				return OK("swap off (%s does not exist)", file)
			}
			return Warning("check that /proc is mounted", "cannot read %s: %v", file, err)
		}
		defer f.Close()
		var active []string
		sc := bufio.NewScanner(f)
		for first := true; sc.Scan(); first = false {
			fields := strings.Fields(sc.Text())
			if first || len(fields) == 0 {
				continue // header: Filename Type Size Used Priority
			}
			active = append(active, fields[0])
		}
		if len(active) == 0 {
			return OK("swap off")
		}
		return Warning("nothing to do: start keeps it off across reboots (comments the swap lines of /etc/fstab with a marker and masks the swap units); reset puts both back",
			"swap is on (%s in %s); start turns it off, because the kubelet does not run with swap on here", strings.Join(active, ", "), file)
	})
}

func kernelModulesCheck(e *Env) Check {
	return NewCheck(NameKernelModules, strings.Join(hostos.RequiredModuleNames(), ", "), func(context.Context) Result {
		pd := e.procDir()
		if pd == "" {
			return Warning(notProbedRemedy, "kernel modules not probed: %v", hostos.ErrLiveHostOnly)
		}
		relB, err := os.ReadFile(filepath.Join(pd, "sys", "kernel", "osrelease"))
		if err != nil {
			return Error("check that /proc is mounted", "cannot read the kernel release: %v", err)
		}
		release := strings.TrimSpace(string(relB))
		modDir := e.moduleDir(release)
		loaded := readFirstFields(filepath.Join(pd, "modules"))
		filesystems := readLastFields(filepath.Join(pd, "filesystems"))
		builtin := map[string]bool{}
		if f, err := e.onRoot(path.Join(modDir, "modules.builtin")); err == nil {
			builtin = moduleNames(f)
		}
		var available map[string]string
		var ok, toLoad, missing []string
		for _, m := range hostos.RequiredModules {
			switch {
			case loaded[m.Name]:
				ok = append(ok, m.Name+" loaded")
			case builtin[m.Name]:
				ok = append(ok, m.Name+" built in")
			case m.FSName != "" && filesystems[m.FSName]:
				ok = append(ok, fmt.Sprintf("%s available (%s in %s/filesystems)", m.Name, m.FSName, pd))
			case m.ProcPath != "" && exists(filepath.Join(pd, m.ProcPath)):
				ok = append(ok, fmt.Sprintf("%s available (%s/%s exists)", m.Name, pd, m.ProcPath))
			default:
				if available == nil {
					available = e.moduleFiles(modDir)
				}
				if f, found := available[m.Name]; found {
					toLoad = append(toLoad, fmt.Sprintf("%s will be loaded by start (%s)", m.Name, f))
				} else {
					missing = append(missing, m.Name)
				}
			}
		}
		if len(missing) > 0 {
			return Error(fmt.Sprintf("install the kernel modules package for kernel %s (on Ubuntu: linux-modules-extra-%s) or boot a kernel with %s", release, release, strings.Join(missing, ", ")),
				"%s: not loaded (%s/modules), not built in (%s/modules.builtin) and no module file under %s", strings.Join(missing, ", "), pd, modDir, modDir)
		}
		return OK("%s", strings.Join(append(ok, toLoad...), "; "))
	})
}

// moduleDir is /lib/modules/<release>, or /usr/lib/modules/<release> on a
// host whose /lib is not the merged-/usr symlink.
func (e *Env) moduleDir(release string) string {
	for _, d := range []string{"/lib/modules", "/usr/lib/modules"} {
		p := path.Join(d, release)
		if e.exists(p) {
			return p
		}
	}
	return path.Join("/lib/modules", release)
}

// moduleFiles indexes the module files under dir by module name. modules.dep
// lists every module depmod saw; the tree is walked only without it.
func (e *Env) moduleFiles(dir string) map[string]string {
	out := map[string]string{}
	host, err := e.onRoot(dir)
	if err != nil {
		return out
	}
	add := func(rel string) {
		base := path.Base(rel)
		i := strings.Index(base, ".ko")
		if i <= 0 {
			return
		}
		out[normModule(base[:i])] = path.Join(dir, rel)
	}
	if f, err := os.Open(filepath.Join(host, "modules.dep")); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, _, ok := strings.Cut(sc.Text(), ":"); ok {
				add(name)
			}
		}
		return out
	}
	_ = filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if rel, rerr := filepath.Rel(host, p); rerr == nil {
				add(filepath.ToSlash(rel))
			}
		}
		return nil
	})
	return out
}

// normModule: the kernel treats '-' and '_' in module names alike.
func normModule(s string) string { return strings.ReplaceAll(s, "-", "_") }

func moduleNames(file string) map[string]bool {
	out := map[string]bool{}
	for name := range readFirstFields(file) {
		base := path.Base(name)
		if i := strings.Index(base, ".ko"); i > 0 {
			out[normModule(base[:i])] = true
		}
	}
	return out
}

// readFirstFields returns the first field of each line; a missing file is
// an empty set, which the callers' messages account for.
func readFirstFields(file string) map[string]bool {
	return readFields(file, func(f []string) string { return f[0] })
}

func readLastFields(file string) map[string]bool {
	return readFields(file, func(f []string) string { return f[len(f)-1] })
}

func readFields(file string, pick func([]string) string) map[string]bool {
	out := map[string]bool{}
	f, err := os.Open(file)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			out[normModule(pick(fields))] = true
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Disk space thresholds for the filesystem that will hold the machines.
// Each machine's rootfs (containerd, kubelet, CNI) is about 1 GiB unpacked
// and blue/green repave keeps two; container images and their unpacked
// layers take the rest. Below MinFreeError a first image pull would fill
// the disk; below MinFreeWarning the kubelet's image GC will be busy from
// day one.
const (
	GiB            = uint64(1) << 30
	MinFreeError   = 5 * GiB
	MinFreeWarning = 10 * GiB
)

// freeUnder is the bytes free on the filesystem that holds (or will
// hold) dir, and the existing ancestor of dir it asked about; a failed
// result when it cannot tell.
func (e *Env) freeUnder(dir string) (free uint64, anc string, failed *Result) {
	anc, err := e.Prober.NearestExistingAncestor(dir)
	if err != nil {
		r := Error("check that /var/lib exists", "%v", err)
		return 0, "", &r
	}
	host, err := e.onRoot(anc)
	if err == nil {
		free, err = e.FreeBytes(host)
	}
	if err != nil {
		r := Error("check the filesystem holding "+anc, "statfs %s: %v", anc, err)
		return 0, anc, &r
	}
	return free, anc, nil
}

func diskSpaceCheck(e *Env) Check {
	machines := e.Layout.MachinesDir()
	return NewCheck(NameDiskSpace, machines, func(context.Context) Result {
		free, anc, failed := e.freeUnder(machines)
		if failed != nil {
			return *failed
		}
		have := fmt.Sprintf("%.1f GiB free on the filesystem holding %s (statfs of %s)", float64(free)/float64(GiB), machines, anc)
		remedy := fmt.Sprintf("free space on the filesystem holding %s or grow it; at least %d GiB are needed, %d GiB recommended", machines, MinFreeError/GiB, MinFreeWarning/GiB)
		switch {
		case free < MinFreeError:
			return Error(remedy, "%s; at least %d GiB are needed", have, MinFreeError/GiB)
		case free < MinFreeWarning:
			return Warning(remedy, "%s; %d GiB are recommended", have, MinFreeWarning/GiB)
		}
		return OK("%s", have)
	})
}

// Package aclhost boots real systemd hosts for integration tests: a Debian
// bookworm tree built once with debootstrap (test/buildcache), cached, and
// booted per test with systemd-nspawn on a private overlayfs.
//
// The ACL variant is the "ACL-like host" of the design: an Azure Container
// Linux os-release, no package manager, and /usr mounted read-only while
// /etc, /opt and /var stay writable. The Debian variant is the same tree with
// Debian's os-release and a writable /usr.
//
// Each host's overlay upper dir records exactly what the host wrote, which is
// what Changes reports; Snapshot and Diff compare trees as seen from inside.
//
// Commands run inside with nsenter into the container's init: the build and
// CI machines do not run systemd as PID 1, so machinectl cannot reach them.
package aclhost

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/buildcache"
)

// Variant selects what kind of host Start boots.
type Variant string

const (
	// ACL is the Azure Container Linux look-alike: read-only /usr, ACL
	// os-release, no apt/dpkg.
	ACL Variant = "acl"
	// Debian is plain Debian bookworm with a writable /usr and apt present
	// (though with no reachable archive).
	Debian Variant = "debian"
)

// Options configure Start. The zero value boots an ACL host on a private
// network.
type Options struct {
	// Variant defaults to ACL.
	Variant Variant
	// Name prefixes the machine name (default "aclhost"); a random suffix
	// keeps concurrently running hosts apart.
	Name string
	// NetNS, if set, is the path of a network namespace (e.g. /run/netns/x)
	// the host joins instead of getting a private network with only lo.
	NetNS string
	// ExtraArgs are appended to the systemd-nspawn command line.
	ExtraArgs []string
	// BootTimeout bounds start to running/degraded (default 60s).
	BootTimeout time.Duration
	// Logf receives progress lines; defaults to t.Logf (or stderr without t).
	Logf func(format string, args ...any)
	// Prepare, if set, runs on the host's root (the merged overlay, as the
	// build machine sees it) after it is mounted and before the host boots
	// for the first time: what an image provisioner such as Ignition does
	// to a fresh root before its first boot. What it writes shows up in
	// Changes like anything the host writes.
	Prepare func(root string) error
}

// Host is one booted test host. Methods are safe for concurrent use.
type Host struct {
	name    string
	variant Variant
	dir     string // per-host temp dir: upper, work, merged, console.log
	upper   string
	merged  string
	lowers  []string
	logf    func(string, ...any)
	opts    Options // as booted, for PowerCycle

	cgroups *hostCgroups
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	leader  int

	// BuildTime is how long EnsureRootfs took to build the cache for this
	// Start (0 when the cache was warm); BootTime is Start to running.
	BuildTime time.Duration
	BootTime  time.Duration

	stopOnce sync.Once
	stopErr  error
	stopped  chan struct{}
}

// RequireE2E skips tb unless AKS_FLEX_NODE_E2E=1, and when it is set fails
// tb (never skips) if something a host needs is missing, so CI cannot go
// green by silently not running.
func RequireE2E(tb testing.TB) {
	tb.Helper()
	if os.Getenv(EnvE2E) != "1" {
		tb.Skipf("set %s=1 to boot systemd-nspawn test hosts (needs root, debootstrap, systemd-nspawn, nsenter, overlayfs)", EnvE2E)
	}
	if err := checkPrerequisites(); err != nil {
		tb.Fatalf("%s=1 but a test host cannot run here: %v", EnvE2E, err)
	}
}

func checkPrerequisites() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (running as uid "+strconv.Itoa(os.Geteuid())+")")
	}
	for _, bin := range []string{"debootstrap", "systemd-nspawn", "nsenter", "journalctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin+" (apt-get install debootstrap systemd-container util-linux)")
		}
	}
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(b, []byte("\toverlay\n")) {
		missing = append(missing, "overlayfs in /proc/filesystems (modprobe overlay)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// MustStart is Start that fails tb on error.
func MustStart(tb testing.TB, opts Options) *Host {
	tb.Helper()
	h, err := Start(context.Background(), tb, opts)
	if err != nil {
		tb.Fatalf("start test host: %v", err)
	}
	return h
}

// Start boots a host from the cached rootfs (building the cache first if it
// is cold) and returns once systemd reports running or degraded. With a
// non-nil tb the host is stopped in tb's cleanup, after dumping its journal
// to the test log (and the artifacts dir) if tb failed; without one the
// caller must call Stop.
func Start(ctx context.Context, tb testing.TB, opts Options) (*Host, error) {
	if opts.Variant == "" {
		opts.Variant = ACL
	}
	if opts.Variant != ACL && opts.Variant != Debian {
		return nil, fmt.Errorf("aclhost: unknown variant %q", opts.Variant)
	}
	if opts.Name == "" {
		opts.Name = "aclhost"
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 60 * time.Second
	}
	logf := opts.Logf
	if logf == nil {
		if tb != nil {
			logf = tb.Logf
		} else {
			logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "aclhost: "+format+"\n", args...) }
		}
	}
	if err := checkPrerequisites(); err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}

	cache, buildTime, err := ensureCache(ctx, logf)
	if err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}

	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	h := &Host{
		name:      fmt.Sprintf("%s-%s-%s", opts.Name, opts.Variant, hex.EncodeToString(suffix[:])),
		variant:   opts.Variant,
		lowers:    cache.lowers(opts.Variant),
		logf:      logf,
		opts:      opts,
		exited:    make(chan struct{}),
		stopped:   make(chan struct{}),
		BuildTime: buildTime,
	}
	if len(h.name) > 64 {
		return nil, fmt.Errorf("aclhost: machine name %q longer than 64 characters", h.name)
	}
	if h.dir, err = os.MkdirTemp("", h.name+"-"); err != nil {
		return nil, err
	}
	h.upper = filepath.Join(h.dir, "upper")
	h.merged = filepath.Join(h.dir, "merged")
	work := filepath.Join(h.dir, "work")
	for _, d := range []string{h.upper, work, h.merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(h.dir)
			return nil, err
		}
	}
	if err := mountOverlay(h.lowers, h.upper, work, h.merged); err != nil {
		os.RemoveAll(h.dir)
		return nil, fmt.Errorf("aclhost: %w", err)
	}

	if opts.Prepare != nil {
		if err := opts.Prepare(h.merged); err != nil {
			_ = buildcache.Unmount(h.merged)
			_ = buildcache.RemoveAllSafe(h.dir)
			return nil, fmt.Errorf("aclhost: prepare %s: %w", h.name, err)
		}
	}
	h.opts = opts

	if tb != nil {
		tb.Cleanup(func() {
			if tb.Failed() {
				h.DumpDiagnostics(tb)
			}
			select {
			case <-h.stopped:
				return // the test stopped it
			default:
			}
			start := time.Now()
			if err := h.Stop(); err != nil {
				tb.Errorf("stop test host %s: %v", h.name, err)
			}
			tb.Logf("test host %s stopped in %s", h.name, time.Since(start).Round(time.Millisecond))
		})
	}

	start := time.Now()
	if err := h.boot(ctx, opts); err != nil {
		h.logf("test host %s did not boot: %v", h.name, err)
		h.dumpTo(h.logf, tb)
		if serr := h.Stop(); serr != nil {
			h.logf("stop %s: %v", h.name, serr)
		}
		return nil, fmt.Errorf("aclhost: boot %s: %w", h.name, err)
	}
	h.BootTime = time.Since(start)
	logf("test host %s (%s) running after %s (leader pid %d, root %s)",
		h.name, h.variant, h.BootTime.Round(time.Millisecond), h.leader, h.merged)
	return h, nil
}

// nspawnEnv returns the environment for systemd-nspawn. The machine's cgroup
// mode must match the host's: on a cgroup v1/hybrid host (this build
// machine) a unified-hierarchy machine registers pods that then all fail.
func nspawnEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		// A real host can set its sysctls (ip_forward, the bridge
		// netfilter knobs, the kernel settings the kubelet requires);
		// nspawn mounts /proc/sys read-only unless told otherwise.
		"SYSTEMD_NSPAWN_API_VFS_WRITABLE=yes",
	}
	var st syscall.Statfs_t
	const cgroup2Magic = 0x63677270
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == cgroup2Magic {
		env = append(env, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	} else {
		env = append(env, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=0")
	}
	return env
}

func (h *Host) nspawnArgs(opts Options) []string {
	args := []string{
		"--boot",
		"--directory=" + h.merged,
		"--machine=" + h.name,
		// No systemd/machined outside to register with or to create a scope.
		"--register=no",
		"--keep-unit",
		// Keep nspawn from writing into the tree, so the upper dir shows only
		// what the host itself wrote.
		"--resolv-conf=off",
		"--timezone=off",
		"--link-journal=no",
		"--console=read-only",
		// A host is root with every capability; the product's nested
		// machines need capabilities the default set lacks (CAP_SYSLOG...).
		"--capability=all",
		// What a real host has and a default container lacks: the kernel
		// log device (the kubelet reads it) and unfiltered keyring
		// syscalls (runc joins a session keyring).
		"--bind=/dev/kmsg",
		"--system-call-filter=@keyring bpf",
	}
	if opts.NetNS != "" {
		args = append(args, "--network-namespace-path="+opts.NetNS)
	} else {
		args = append(args, "--private-network")
	}
	if h.variant == ACL {
		// Only /usr is read-only on ACL; --read-only would take /etc and
		// /var with it.
		args = append(args, "--bind-ro="+filepath.Join(h.merged, "usr")+":/usr")
	}
	return append(args, opts.ExtraArgs...)
}

func (h *Host) consoleLog() string { return filepath.Join(h.dir, "console.log") }

func (h *Host) boot(ctx context.Context, opts Options) error {
	console, err := os.Create(h.consoleLog())
	if err != nil {
		return err
	}
	defer console.Close()
	if h.cgroups, err = newHostCgroups("aclhost-"+h.name, h.logf); err != nil {
		return err
	}
	procs := h.cgroups.procsFiles()
	for _, p := range procs {
		if strings.ContainsAny(p, " \t\n") {
			return fmt.Errorf("cgroup path %q contains white space", p)
		}
	}
	// Join the host's own cgroups before exec'ing nspawn: nspawn derives
	// the machine's cgroup from its own at startup.
	const wrapper = `for f in $ACLHOST_CGROUP_PROCS; do echo $$ >"$f"; done; unset ACLHOST_CGROUP_PROCS; exec systemd-nspawn "$@"`
	h.cmd = exec.Command("/bin/sh", append([]string{"-ec", wrapper, "sh"}, h.nspawnArgs(opts)...)...)
	h.cmd.Env = append(nspawnEnv(), "ACLHOST_CGROUP_PROCS="+strings.Join(procs, " "))
	h.cmd.Stdout, h.cmd.Stderr = console, console
	// Own process group: a ^C to `go test` reaches the test binary, whose
	// cleanup then stops the host, rather than nspawn directly.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		return err
	}
	go func() {
		h.waitErr = h.cmd.Wait()
		close(h.exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, opts.BootTimeout)
	defer cancel()
	if h.leader, err = h.findLeader(ctx); err != nil {
		return err
	}
	return h.waitRunning(ctx)
}

// findLeader returns the container's init: the child of systemd-nspawn once
// it has exec'd systemd.
func (h *Host) findLeader(ctx context.Context) (int, error) {
	nspawn := h.cmd.Process.Pid
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", nspawn))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				if path.Base(exe) == "systemd" || path.Base(exe) == "init" {
					return pid, nil
				}
			}
		}
		select {
		case <-h.exited:
			return 0, fmt.Errorf("systemd-nspawn exited before the container's init started: %v\n%s", h.waitErr, h.consoleTail(40))
		case <-ctx.Done():
			return 0, fmt.Errorf("no container init below systemd-nspawn pid %d: %w\n%s", nspawn, ctx.Err(), h.consoleTail(40))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (h *Host) waitRunning(ctx context.Context) error {
	var last string
	for {
		out, stderr, _ := h.Run(ctx, "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(out)
		switch state {
		case "running":
			return nil
		case "degraded":
			failed, _, _ := h.Run(ctx, "systemctl", "--failed", "--no-pager", "--no-legend")
			h.logf("test host %s is degraded; failed units:\n%s", h.name, failed)
			return nil
		case "initializing", "starting", "offline", "":
			// "offline": systemd is exec'd but not yet listening.
			last = strings.TrimSpace(state + " " + stderr)
		default:
			failed, _, _ := h.Run(context.Background(), "systemctl", "--failed", "--no-pager")
			return fmt.Errorf("system state %q; failed units:\n%s", state, failed)
		}
		select {
		case <-h.exited:
			return fmt.Errorf("systemd-nspawn exited during boot: %v\n%s", h.waitErr, h.consoleTail(40))
		case <-ctx.Done():
			return fmt.Errorf("waiting for systemctl is-system-running: %w (last: %s)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h *Host) consoleTail(n int) string {
	s, err := buildcache.TailFile(h.consoleLog(), n)
	if err != nil {
		return ""
	}
	return "console:\n" + s
}

// Name is the machine name (also the host's hostname).
func (h *Host) Name() string { return h.name }

// Variant is what kind of host this is.
func (h *Host) Variant() Variant { return h.variant }

// Leader is the PID, in the build machine's PID namespace, of the host's
// systemd.
func (h *Host) Leader() int { return h.leader }

// UpperDir is the overlay upper dir: everything the host wrote.
func (h *Host) UpperDir() string { return h.upper }

// innerEnv is the environment commands run with inside: the test binary's
// own (GOPATH, TMPDIR, ...) has no business there.
var innerEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"TERM=dumb",
	"SYSTEMD_PAGER=",
	"SYSTEMD_COLORS=0",
	// preflight, start and host inspect ask IMDS for the VM's userData; a
	// test host has no business asking anything but what the test set up
	// (tests that want it point this at a fake with `env`).
	"AKS_FLEX_NODE_IMDS_ENDPOINT=off",
}

// Command returns a command that runs args inside the host, in all of its
// namespaces (mount, UTS, IPC, network, PID, cgroup) and its root.
func (h *Host) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"-t", strconv.Itoa(h.leader), "-a", "--"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	cmd.Env = innerEnv
	cmd.Dir = "/"
	// nsenter forks to enter the PID namespace; kill the whole group on
	// cancellation or the inner process outlives the context.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs args inside the host. A non-zero exit is an error that names the
// command and carries its stderr; errors.As finds the *exec.ExitError.
func (h *Host) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return h.run(ctx, nil, args...)
}

func (h *Host) run(ctx context.Context, stdin io.Reader, args ...string) (string, string, error) {
	if h.leader == 0 {
		return "", "", errors.New("aclhost: host has no running init")
	}
	select {
	case <-h.stopped:
		return "", "", fmt.Errorf("aclhost: host %s is stopped", h.name)
	default:
	}
	var out, errb bytes.Buffer
	cmd := h.Command(ctx, args...)
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %q: %w: %s", h.name, args, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// RunOK runs args inside the host and fails tb unless they succeed.
func (h *Host) RunOK(tb testing.TB, args ...string) string {
	tb.Helper()
	out, _, err := h.Run(context.Background(), args...)
	if err != nil {
		tb.Fatalf("%v\nstdout:\n%s", err, out)
	}
	return out
}

// Shell runs script with /bin/sh -e inside the host.
func (h *Host) Shell(ctx context.Context, script string) (stdout, stderr string, err error) {
	return h.Run(ctx, "/bin/sh", "-ec", script)
}

// ShellOK is Shell that fails tb unless the script succeeds.
func (h *Host) ShellOK(tb testing.TB, script string) string {
	tb.Helper()
	out, _, err := h.Shell(context.Background(), script)
	if err != nil {
		tb.Fatalf("%v\nstdout:\n%s", err, out)
	}
	return out
}

// Path returns the build machine's path for p inside the running host
// (through /proc/<leader>/root, so it sees the host's own mounts: /run,
// /tmp and the read-only /usr). Use it to read; put files in with CopyIn.
func (h *Host) Path(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", h.leader), filepath.Clean("/"+p))
}

// checkTarget refuses targets under /usr: it is read-only on ACL hosts, and
// a test that planted files there would be testing a host nobody has.
func checkTarget(dst string) (string, error) {
	if !path.IsAbs(dst) {
		return "", fmt.Errorf("aclhost: copy target %q is not absolute", dst)
	}
	clean := path.Clean(dst)
	if clean == "/usr" || strings.HasPrefix(clean, "/usr/") {
		return "", fmt.Errorf("aclhost: copy target %s is under /usr: /usr is read-only on ACL hosts; tests must not put files there (use /opt, /etc or /var)", dst)
	}
	if clean == "/" {
		return "", errors.New("aclhost: copy target is /")
	}
	return clean, nil
}

// CopyIn copies the file or directory tree src from the build machine to
// dst inside the host, writing from inside (so the host's own mounts and
// permissions apply). A file gets mode; a directory keeps its entries'
// modes and dst gets mode if it is non-zero. Parents are created.
func (h *Host) CopyIn(src, dst string, mode os.FileMode) error {
	dst, err := checkTarget(dst)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("aclhost: copy in: %w", err)
	}
	if !st.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		return h.writeInside(f, dst, mode)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	script := `mkdir -p "$1" && tar -x --no-same-owner -C "$1" -f -`
	if mode != 0 {
		script += fmt.Sprintf(` && chmod %o "$1"`, mode.Perm())
	}
	if _, _, err := h.run(context.Background(), pr, "/bin/sh", "-ec", script, "sh", dst); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("aclhost: copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// WriteFile writes data to dst inside the host (same rules as CopyIn).
func (h *Host) WriteFile(dst string, data []byte, mode os.FileMode) error {
	dst, err := checkTarget(dst)
	if err != nil {
		return err
	}
	return h.writeInside(bytes.NewReader(data), dst, mode)
}

func (h *Host) writeInside(r io.Reader, dst string, mode os.FileMode) error {
	// Write next to the target and rename, so units and scripts are never
	// seen half-written by the host's systemd.
	script := fmt.Sprintf(`d=$(dirname "$1"); mkdir -p "$d"; t="$1.aclhost-tmp"; cat >"$t"; chmod %o "$t"; mv -f "$t" "$1"`, mode.Perm())
	if _, _, err := h.run(context.Background(), r, "/bin/sh", "-ec", script, "sh", dst); err != nil {
		return fmt.Errorf("aclhost: write %s: %w", dst, err)
	}
	return nil
}

func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
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

// Stop kills the host's init with SIGKILL (a SIGTERM to nspawn can take 90 s
// while the machine waits for its processes), waits for systemd-nspawn to
// exit, unmounts the overlay and removes the host's temp dir. It is
// idempotent.
func (h *Host) Stop() error {
	h.stopOnce.Do(func() {
		close(h.stopped)
		h.stopErr = h.stop()
	})
	return h.stopErr
}

// PowerCycle simulates a power cut and the next boot: it kills the host's
// init (everything inside dies at once, with no shutdown), then boots the
// same tree again; the overlay upper dir, the host's disk, is kept. Unlike
// a real power cut the page cache survives (the kernel is the build
// machine's), so this tests the order of writes and renames, not fsync.
// It must not run concurrently with other methods of h.
func (h *Host) PowerCycle(ctx context.Context) error {
	select {
	case <-h.stopped:
		return fmt.Errorf("aclhost: host %s is stopped", h.name)
	default:
	}
	if h.leader != 0 {
		if err := syscall.Kill(h.leader, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("aclhost: power cut %s: kill init %d: %w", h.name, h.leader, err)
		}
	}
	select {
	case <-h.exited:
	case <-time.After(15 * time.Second):
		h.cgroups.kill()
		_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-h.exited:
		case <-time.After(15 * time.Second):
			return fmt.Errorf("aclhost: power cut %s: systemd-nspawn pid %d does not exit", h.name, h.cmd.Process.Pid)
		}
	}
	h.cgroups.kill()
	if err := h.cgroups.remove(); err != nil {
		return fmt.Errorf("aclhost: power cut %s: %w", h.name, err)
	}
	h.exited = make(chan struct{})
	h.leader, h.waitErr = 0, nil
	start := time.Now()
	if err := h.boot(ctx, h.opts); err != nil {
		return fmt.Errorf("aclhost: reboot %s after a power cut: %w", h.name, err)
	}
	h.BootTime = time.Since(start)
	h.logf("test host %s rebooted after a power cut in %s (leader pid %d)", h.name, h.BootTime.Round(time.Millisecond), h.leader)
	return nil
}

func (h *Host) stop() error {
	var errs []error
	if h.cmd != nil && h.cmd.Process != nil {
		select {
		case <-h.exited:
		default:
			// Killing the init of a PID namespace kills everything in it;
			// nspawn then sees its child die and exits at once.
			if h.leader != 0 {
				if err := syscall.Kill(h.leader, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("kill init %d: %w", h.leader, err))
				}
			} else {
				// Boot failed before init was found: kill whatever nspawn
				// started, then nspawn.
				h.cgroups.kill()
			}
			select {
			case <-h.exited:
			case <-time.After(15 * time.Second):
				h.logf("systemd-nspawn of %s did not exit 15s after its init was killed; killing it", h.name)
				h.cgroups.kill()
				_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL)
				select {
				case <-h.exited:
				case <-time.After(15 * time.Second):
					errs = append(errs, fmt.Errorf("systemd-nspawn pid %d does not exit", h.cmd.Process.Pid))
				}
			}
		}
	}
	// Anything still in the host's cgroups (a process that escaped the PID
	// namespace teardown cannot exist, but a stuck nspawn can) goes too.
	h.cgroups.kill()
	if err := h.cgroups.remove(); err != nil {
		errs = append(errs, err)
	}
	if err := buildcache.Unmount(h.merged); err != nil {
		errs = append(errs, err)
	}
	if err := buildcache.RemoveAllSafe(h.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mountOverlay mounts an overlay at merged. lowers are listed top first.
func mountOverlay(lowers []string, upper, work, merged string) error {
	for _, p := range append(append([]string{}, lowers...), upper, work, merged) {
		if strings.ContainsAny(p, ",:") {
			return fmt.Errorf("overlay path %q contains ',' or ':'", p)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), upper, work)
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s (%s): %w", merged, opts, err)
	}
	return nil
}

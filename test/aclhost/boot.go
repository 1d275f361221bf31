package aclhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/buildcache"
)

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
	opts, err := opts.withDefaults(tb)
	if err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}
	if err := checkPrerequisites(); err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}
	cache, buildTime, err := ensureCache(ctx, opts.Logf)
	if err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}
	h, err := newHost(opts, cache.lowers(opts.Variant))
	if err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}
	h.BuildTime = buildTime
	if err := h.mountRoot(); err != nil {
		return nil, fmt.Errorf("aclhost: %w", err)
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(h.merged); err != nil {
			_ = buildcache.Unmount(h.merged)
			_ = buildcache.RemoveAllSafe(h.dir)
			return nil, fmt.Errorf("aclhost: prepare %s: %w", h.name, err)
		}
	}
	if tb != nil {
		tb.Cleanup(func() { h.cleanup(tb) })
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
	h.logf("test host %s (%s) running after %s (leader pid %d, root %s)",
		h.name, h.variant, h.BootTime.Round(time.Millisecond), h.leader, h.merged)
	return h, nil
}

// withDefaults fills in the zero fields of o; Logf goes to tb's log, or to
// stderr without one.
func (o Options) withDefaults(tb testing.TB) (Options, error) {
	if o.Variant == "" {
		o.Variant = ACL
	}
	if o.Variant != ACL && o.Variant != Debian {
		return o, fmt.Errorf("unknown variant %q", o.Variant)
	}
	if o.Name == "" {
		o.Name = "aclhost"
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 60 * time.Second
	}
	if o.Logf == nil {
		if tb != nil {
			o.Logf = tb.Logf
		} else {
			o.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "aclhost: "+format+"\n", args...) }
		}
	}
	return o, nil
}

// newHost names a host (a random suffix keeps concurrent hosts apart) that
// will boot from lowers; nothing is created yet.
func newHost(opts Options, lowers []string) (*Host, error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	h := &Host{
		name:    fmt.Sprintf("%s-%s-%s", opts.Name, opts.Variant, hex.EncodeToString(suffix[:])),
		variant: opts.Variant,
		lowers:  lowers,
		logf:    opts.Logf,
		opts:    opts,
		exited:  make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if len(h.name) > 64 {
		return nil, fmt.Errorf("machine name %q longer than 64 characters", h.name)
	}
	return h, nil
}

// mountRoot creates the host's temp dir and mounts its root there: an
// overlay of the cached layers with a fresh upper dir, the host's disk.
func (h *Host) mountRoot() error {
	var err error
	if h.dir, err = os.MkdirTemp("", h.name+"-"); err != nil {
		return err
	}
	h.upper = filepath.Join(h.dir, "upper")
	h.merged = filepath.Join(h.dir, "merged")
	work := filepath.Join(h.dir, "work")
	for _, d := range []string{h.upper, work, h.merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(h.dir)
			return err
		}
	}
	if err := mountOverlay(h.lowers, h.upper, work, h.merged); err != nil {
		os.RemoveAll(h.dir)
		return err
	}
	return nil
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

// cleanup is the test's cleanup of a host Start registered: diagnostics
// when the test failed, then Stop unless the test stopped it.
func (h *Host) cleanup(tb testing.TB) {
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
	if err := h.PowerOff(); err != nil {
		return err
	}
	return h.PowerOn(ctx)
}

// PowerOff is PowerCycle's power cut alone: the host stays off (its
// disk kept) until PowerOn, so a test can watch the cluster while it is
// gone. It must not run concurrently with other methods of h.
func (h *Host) PowerOff() error {
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
	return nil
}

// PowerOn boots the host PowerOff cut, from the same disk.
func (h *Host) PowerOn(ctx context.Context) error {
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

package aclhost

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/test/buildcache"
)

const probeUnit = `[Unit]
Description=aclhost probe service

[Service]
Type=simple
ExecStart=/bin/sleep infinity
`

const probeOneshot = `[Unit]
Description=aclhost probe oneshot

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'mkdir -p /var/lib/aclhost-probe && echo ok >/var/lib/aclhost-probe/ran'
`

func TestACLHostBoots(t *testing.T) {
	RequireE2E(t)
	for _, v := range []Variant{ACL, Debian} {
		t.Run(string(v), func(t *testing.T) { testBoot(t, v) })
	}
}

// testBoot boots a host of variant v and checks what every test relies on:
// a real systemd, /usr read-only exactly on ACL, the variant's identity,
// files and units put in from outside that work, and a record of what the
// host wrote that has nothing else in it.
func testBoot(t *testing.T, v Variant) {
	h, err := Start(context.Background(), t, Options{Variant: v})
	if err != nil {
		t.Fatal(err)
	}
	if h.BuildTime > 0 {
		t.Logf("cold rootfs build took %s", h.BuildTime.Round(time.Second))
	}
	t.Logf("start to running took %s", h.BootTime.Round(time.Millisecond))

	checkSystemdIsInit(t, h)
	checkUsrWritability(t, h)
	for _, dir := range []string{"/opt", "/etc", "/var/lib"} {
		p := dir + "/aclhost-writable"
		h.RunOK(t, "touch", p)
		h.RunOK(t, "rm", p)
	}
	checkIdentity(t, h)
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkNoPlantingUnderUsr(t, h, src)

	usrBefore, etcBefore := snapshot(t, h, "/usr"), snapshot(t, h, "/etc")
	runProbeUnits(t, h, src)
	if d := Diff(usrBefore, snapshot(t, h, "/usr")); len(d) > 0 {
		t.Errorf("/usr changed:\n%s", strings.Join(d, "\n"))
	}
	checkEtcDiff(t, Diff(etcBefore, snapshot(t, h, "/etc")),
		"+ /etc/systemd/system/aclhost-probe.service", "+ /etc/systemd/system/aclhost-probe-oneshot.service")
	checkChangeSet(t, h)

	start := time.Now()
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stop took %s", time.Since(start).Round(time.Millisecond))
	assertGone(t, h)
}

// checkSystemdIsInit: systemd is PID 1, up, and named after the machine.
func checkSystemdIsInit(t *testing.T, h *Host) {
	t.Helper()
	if got := strings.TrimSpace(h.RunOK(t, "cat", "/proc/1/comm")); got != "systemd" {
		t.Errorf("PID 1 inside is %q, want systemd", got)
	}
	state, _, _ := h.Run(context.Background(), "systemctl", "is-system-running")
	if s := strings.TrimSpace(state); s != "running" && s != "degraded" {
		t.Errorf("systemctl is-system-running = %q", s)
	}
	if got := strings.TrimSpace(h.RunOK(t, "hostname")); got != h.Name() {
		t.Errorf("hostname = %q, want %q", got, h.Name())
	}
}

// checkUsrWritability: /usr is a read-only mount on ACL (writes fail with
// EROFS) and writable on Debian, where the test leaves /usr/local/bin/x
// behind for checkChangeSet to find.
func checkUsrWritability(t *testing.T, h *Host) {
	t.Helper()
	usrOpts := mountOptions(t, h, "/usr")
	_, stderr, touchErr := h.Run(context.Background(), "touch", "/usr/aclhost-probe")
	switch h.Variant() {
	case ACL:
		if touchErr == nil || !strings.Contains(stderr, "Read-only file system") {
			t.Errorf("touch /usr/aclhost-probe on ACL: err=%v stderr=%q, want EROFS", touchErr, stderr)
		}
		if !strings.HasPrefix(usrOpts, "ro") {
			t.Errorf("/usr mount options %q, want ro", usrOpts)
		}
	case Debian:
		if touchErr != nil {
			t.Errorf("touch /usr/aclhost-probe on Debian: %v", touchErr)
		}
		h.RunOK(t, "rm", "/usr/aclhost-probe")
		h.RunOK(t, "touch", "/usr/local/bin/x")
	}
}

// checkIdentity: the ACL host says it is Azure Container Linux in both
// os-release files and has no package manager; the Debian host is Debian
// with apt and dpkg.
func checkIdentity(t *testing.T, h *Host) {
	t.Helper()
	osRelease := h.RunOK(t, "cat", "/etc/os-release", "/usr/lib/os-release")
	has := func(bin string) bool {
		_, _, err := h.Shell(context.Background(), "command -v "+bin)
		return err == nil
	}
	switch h.Variant() {
	case ACL:
		if n := strings.Count(osRelease, "VARIANT_ID=azurecontainerlinux"); n != 2 {
			t.Errorf("/etc/os-release + /usr/lib/os-release have VARIANT_ID=azurecontainerlinux %d times, want 2:\n%s", n, osRelease)
		}
		for _, bin := range []string{"apt-get", "apt", "dpkg"} {
			if has(bin) {
				t.Errorf("%s is present on the ACL host", bin)
			}
		}
	case Debian:
		if !strings.Contains(osRelease, "ID=debian") {
			t.Errorf("Debian os-release:\n%s", osRelease)
		}
		if !has("apt-get") || !has("dpkg") {
			t.Errorf("apt-get/dpkg missing on the Debian host")
		}
	}
}

// checkNoPlantingUnderUsr: the harness refuses to put files under /usr on
// any variant, so no test can pass by planting what a real ACL host lacks.
func checkNoPlantingUnderUsr(t *testing.T, h *Host, src string) {
	t.Helper()
	if err := h.WriteFile("/usr/local/bin/planted", []byte("x"), 0o755); err == nil {
		t.Errorf("WriteFile under /usr succeeded; tests must not plant files there")
	}
	if err := h.CopyIn(src, "/usr/lib/x", 0o644); err == nil {
		t.Errorf("CopyIn under /usr succeeded")
	}
}

// runProbeUnits puts two units and a file in from outside, then checks
// that the file arrived with its mode, that the units verify, load and
// start for real, and that the journal records them.
func runProbeUnits(t *testing.T, h *Host, src string) {
	t.Helper()
	if err := h.WriteFile("/etc/systemd/system/aclhost-probe.service", []byte(probeUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/etc/systemd/system/aclhost-probe-oneshot.service", []byte(probeOneshot), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.CopyIn(src, "/opt/aclhost/hello", 0o600); err != nil {
		t.Fatal(err)
	}
	if got := h.RunOK(t, "stat", "-c", "%a %s", "/opt/aclhost/hello"); strings.TrimSpace(got) != "600 6" {
		t.Errorf("copied file: %q", got)
	}
	h.RunOK(t, "systemd-analyze", "verify", "/etc/systemd/system/aclhost-probe.service", "/etc/systemd/system/aclhost-probe-oneshot.service")
	h.RunOK(t, "systemctl", "daemon-reload")
	h.RunOK(t, "systemctl", "start", "aclhost-probe.service", "aclhost-probe-oneshot.service")
	for _, u := range []string{"aclhost-probe.service", "aclhost-probe-oneshot.service"} {
		if got := strings.TrimSpace(h.RunOK(t, "systemctl", "is-active", u)); got != "active" {
			t.Errorf("%s is %q", u, got)
		}
	}
	if got := strings.TrimSpace(h.RunOK(t, "cat", "/var/lib/aclhost-probe/ran")); got != "ok" {
		t.Errorf("oneshot output %q", got)
	}
	if j := h.Journal(context.Background()); !strings.Contains(j, "aclhost probe service") {
		t.Errorf("journal does not mention the probe unit:\n%s", j)
	}
}

func snapshot(t *testing.T, h *Host, paths ...string) Tree {
	t.Helper()
	tree, err := h.Snapshot(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// checkEtcDiff: diff (of /etc) holds exactly the want entries, compared by
// their first two fields ("+ /path").
func checkEtcDiff(t *testing.T, diff []string, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	for _, d := range diff {
		key := strings.Join(strings.Fields(d)[:2], " ")
		if !missing[key] {
			t.Errorf("unexpected /etc change: %s", d)
		}
		delete(missing, key)
	}
	for k := range missing {
		t.Errorf("missing /etc change: %s", k)
	}
}

// checkChangeSet: the overlay records what runProbeUnits wrote and nothing
// under /usr, except on Debian the file checkUsrWritability left there.
func checkChangeSet(t *testing.T, h *Host) {
	t.Helper()
	changes, err := h.ChangeSet()
	if err != nil {
		t.Fatal(err)
	}
	debian := h.Variant() == Debian
	seen := map[string]bool{}
	for _, c := range changes {
		seen[c.Path] = true
		if strings.HasPrefix(c.Path, "/usr/") && !(debian && c.Path == "/usr/local/bin/x") {
			t.Errorf("host wrote under /usr: %s", c)
		}
	}
	for _, p := range []string{"/etc/systemd/system/aclhost-probe.service", "/opt/aclhost/hello", "/var/lib/aclhost-probe/ran"} {
		if !seen[p] {
			t.Errorf("Changes() lacks %s", p)
		}
	}
	if debian && !seen["/usr/local/bin/x"] {
		t.Errorf("Changes() lacks /usr/local/bin/x on Debian")
	}
	if t.Failed() {
		for _, c := range changes {
			t.Log(c)
		}
	}
}

// mountOptions returns the per-mount options of the mount at target inside h.
func mountOptions(t *testing.T, h *Host, target string) string {
	t.Helper()
	mps, err := hostos.ParseMountInfo(strings.NewReader(h.RunOK(t, "cat", "/proc/self/mountinfo")))
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, m := range mps {
		if m.MountPoint == target {
			opts = strings.Join(m.Options, ",") // the last one is the one on top
		}
	}
	if opts == "" && target == "/usr" && h.Variant() == ACL {
		t.Fatalf("no %s mount inside the ACL host", target)
	}
	return opts
}

func assertGone(t *testing.T, h *Host) {
	t.Helper()
	if err := syscall.Kill(h.leader, 0); err == nil {
		t.Errorf("init %d still alive after Stop", h.leader)
	}
	if _, err := os.Stat(h.dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still there: %v", h.dir, err)
	}
	if mps, _ := buildcache.MountsBelow(h.dir); len(mps) > 0 {
		t.Errorf("still mounted: %v", mps)
	}
	if h.cgroups != nil && len(h.cgroups.dirs) > 0 {
		t.Errorf("cgroups left: %v", h.cgroups.dirs)
	}
}

func TestTwoHostsAtOnce(t *testing.T) {
	RequireE2E(t)
	if _, err := EnsureRootfs(context.Background()); err != nil {
		t.Fatal(err)
	}
	hosts := make([]*Host, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, v := range []Variant{ACL, ACL} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hosts[i], errs[i] = Start(context.Background(), t, Options{Variant: v, Name: "pair"})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b := hosts[0], hosts[1]
	if a.Name() == b.Name() {
		t.Fatalf("both hosts are named %s", a.Name())
	}
	a.ShellOK(t, "echo a >/etc/which")
	if _, _, err := b.Run(context.Background(), "cat", "/etc/which"); err == nil {
		t.Errorf("file written in %s is visible in %s", a.Name(), b.Name())
	}
	// Each host's systemd manages only its own cgroup tree: stopping a unit
	// of the same name in one must not touch the other's.
	for _, h := range hosts {
		if err := h.WriteFile("/etc/systemd/system/pair.service", []byte(probeUnit), 0o644); err != nil {
			t.Fatal(err)
		}
		h.RunOK(t, "systemctl", "daemon-reload")
		h.RunOK(t, "systemctl", "start", "pair.service")
	}
	a.RunOK(t, "systemctl", "stop", "pair.service")
	if got := strings.TrimSpace(b.RunOK(t, "systemctl", "is-active", "pair.service")); got != "active" {
		t.Errorf("stopping pair.service in %s left it %q in %s", a.Name(), got, b.Name())
	}
	for _, h := range hosts {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
		assertGone(t, h)
	}
}

func TestDiff(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc/sub"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var/log/journal/x"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/a"), []byte("a"), 0o644))
	must(os.WriteFile(filepath.Join(root, "var/log/journal/x/j"), []byte("j"), 0o644))
	must(os.Symlink("a", filepath.Join(root, "etc/l")))
	before, err := SnapshotDir(root, DefaultExcludes, "/etc", "/var", "/missing")
	must(err)
	if _, ok := before["/var/log/journal/x/j"]; ok {
		t.Errorf("journal not excluded")
	}
	if d := Diff(before, before); len(d) != 0 {
		t.Errorf("Diff(a, a) = %v", d)
	}
	must(os.WriteFile(filepath.Join(root, "etc/a"), []byte("b"), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc/sub/new"), nil, 0o600))
	must(os.Remove(filepath.Join(root, "etc/l")))
	must(os.WriteFile(filepath.Join(root, "var/log/journal/x/j"), []byte("jj"), 0o644))
	after, err := SnapshotDir(root, DefaultExcludes, "/etc", "/var")
	must(err)
	d := Diff(before, after)
	want := []string{"~ /etc/a:", "- /etc/l ", "+ /etc/sub/new "}
	if len(d) != len(want) {
		t.Fatalf("Diff = %q, want %d entries", d, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(d[i], want[i]) {
			t.Errorf("Diff[%d] = %q, want prefix %q", i, d[i], want[i])
		}
	}
}

func TestCheckTarget(t *testing.T) {
	for _, p := range []string{"/usr", "/usr/local/bin/x", "/usr/../usr/lib/x", "relative", "/"} {
		if _, err := checkTarget(p); err == nil {
			t.Errorf("checkTarget(%q) accepted", p)
		}
	}
	for _, p := range []string{"/opt/x", "/etc/systemd/system/a.service", "/usrx/y"} {
		if _, err := checkTarget(p); err != nil {
			t.Errorf("checkTarget(%q): %v", p, err)
		}
	}
}

func TestCacheKey(t *testing.T) {
	k := CacheKey()
	if len(k) != 16 || k != CacheKey() {
		t.Fatalf("CacheKey() = %q, not stable", k)
	}
	old := Rootfs
	t.Cleanup(func() { Rootfs = old })
	Rootfs.Packages = append(append([]string{}, old.Packages...), "extra")
	if CacheKey() == k {
		t.Errorf("CacheKey ignores the package list")
	}
}

func TestOverlayChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts need mknod (root)")
	}
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	for _, p := range []string{lower + "/etc", lower + "/usr/bin", upper + "/etc", upper + "/usr/bin", upper + "/opt/new"} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{lower + "/etc/kept", lower + "/etc/mod", lower + "/usr/bin/gone", upper + "/etc/mod", upper + "/opt/new/f"} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mknod(upper+"/usr/bin/gone", syscall.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	got, err := overlayChanges(upper, []string{lower})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, c := range got {
		s = append(s, c.String())
	}
	want := "M /etc/mod,A /opt,A /opt/new,A /opt/new/f,D /usr/bin/gone"
	if strings.Join(s, ",") != want {
		t.Errorf("changes = %s, want %s", strings.Join(s, ","), want)
	}
}

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
//
// Files: boot.go starts, stops and power-cycles a host; exec.go runs
// commands in it; files.go puts files in; tree.go compares what it wrote;
// diagnostics.go collects its journal and console when a test fails;
// rootfs.go is the cached tree it boots from.
package aclhost

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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

// Name is the machine name (also the host's hostname).
func (h *Host) Name() string { return h.name }

// Variant is what kind of host this is.
func (h *Host) Variant() Variant { return h.variant }

// Leader is the PID, in the build machine's PID namespace, of the host's
// systemd.
func (h *Host) Leader() int { return h.leader }

// UpperDir is the overlay upper dir: everything the host wrote.
func (h *Host) UpperDir() string { return h.upper }

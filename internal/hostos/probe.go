package hostos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// ErrLiveHostOnly is returned by probes whose answer exists only on the
// running host (its mount table, its PID 1) when the Prober looks at some
// other tree and was given no proc directory that describes it.
var ErrLiveHostOnly = errors.New("needs the running host: root is not / and no proc dir was given")

// Prober runs the probes against one host tree. The zero value probes the
// running host.
type Prober struct {
	// Root is the host's "/" ("" means "/"). Files are looked up inside it.
	Root string

	// ProcDir is a proc(5) tree describing the host at Root: mount table
	// (self/mountinfo) and PID 1 (1/comm). Empty means /proc when Root is
	// "/" and nothing otherwise, because the running host's mount table
	// says nothing about an image that is not booted. Tests point it at
	// fixtures; mount points in it are read as paths inside Root.
	ProcDir string

	// Run executes a host command; nil means Exec. It is only used when
	// Root is "/", since running an image's binaries on this host proves
	// nothing about the image.
	Run Runner
}

func (p *Prober) root() string { return normRoot(p.Root) }

func (p *Prober) live() bool { return p.root() == "/" }

func (p *Prober) procDir() string {
	if p.ProcDir != "" {
		return p.ProcDir
	}
	if p.live() {
		return "/proc"
	}
	return ""
}

func (p *Prober) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if p.Run != nil {
		return p.Run(ctx, name, args...)
	}
	return Exec(ctx, name, args...)
}

// MountInfoPath is where the mount table is read from, or "" when there is
// none for this root.
func (p *Prober) MountInfoPath() string {
	if d := p.procDir(); d != "" {
		return filepath.Join(d, "self", "mountinfo")
	}
	return ""
}

// Mounts reads the mount table describing the host at Root.
func (p *Prober) Mounts() ([]Mount, error) {
	mi := p.MountInfoPath()
	if mi == "" {
		return nil, fmt.Errorf("mount table: %w", ErrLiveHostOnly)
	}
	ms, err := ReadMountInfo(mi)
	if err != nil {
		return nil, fmt.Errorf("mount table: %w", err)
	}
	return ms, nil
}

// UsrReadOnly reports whether /usr is served by a read-only mount, and
// which mount that is. It is read from the mount table, never from the
// distribution: a writable /usr on ACL or a read-only one on Ubuntu is
// exactly what preflight must catch.
func UsrReadOnly(mounts []Mount) (bool, Mount) {
	m := MountFor(mounts, "/usr")
	return m.ReadOnly(), m
}

// toolDirs is where LookTool and the package manager probe search: the
// directories every supported distribution's root PATH starts with. The
// agent runs from systemd with a fixed PATH, so the caller's PATH is not
// consulted.
var toolDirs = []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"}

// LookTool finds an executable named name in the standard tool directories
// of the tree at root and returns its path as seen inside that tree.
func LookTool(root, name string) (string, bool) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", false
	}
	for _, d := range toolDirs {
		p := path.Join(d, name)
		if isExecutable(root, p) {
			return p, true
		}
	}
	return "", false
}

// LookTool is the package function inside p.Root.
func (p *Prober) LookTool(name string) (string, bool) { return LookTool(p.root(), name) }

func isExecutable(root, p string) bool {
	host, err := fsroot.Resolve(root, p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(host)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func exists(root, p string) bool {
	host, err := fsroot.Resolve(root, p)
	if err != nil {
		return false
	}
	_, err = os.Stat(host)
	return err == nil
}

func isDir(root, p string) bool {
	host, err := fsroot.Resolve(root, p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(host)
	return err == nil && fi.IsDir()
}

// PackageManager is what the package manager probe found.
type PackageManager struct {
	Name   string // "apt-get", "tdnf", "dnf"; "" when none was found
	Path   string // inside the root
	Usable bool
	Detail string // what was found or missing, for messages
}

type pmCandidate struct {
	name string
	// dbs are the package databases the tool needs; a binary without its
	// database is a leftover (or a sysext) that cannot install anything.
	dbs    []string
	dbKind string
}

var pmCandidates = []pmCandidate{
	{"apt-get", []string{"/var/lib/dpkg/status"}, "dpkg status file"},
	{"tdnf", []string{"/var/lib/rpm", "/usr/lib/sysimage/rpm"}, "rpm database"},
	{"dnf", []string{"/var/lib/rpm", "/usr/lib/sysimage/rpm"}, "rpm database"},
}

// DetectPackageManager returns the first usable package manager of the
// tree at root, in the order apt-get, tdnf, dnf (Azure Linux can carry a dnf
// alongside tdnf; tdnf is its native one). If none is usable, the first one
// present is returned with Usable false; if none is present, Name is empty.
func DetectPackageManager(root string) PackageManager {
	var firstFound *PackageManager
	for _, c := range pmCandidates {
		p, ok := LookTool(root, c.name)
		if !ok {
			continue
		}
		pm := PackageManager{Name: c.name, Path: p}
		for _, db := range c.dbs {
			if exists(root, db) {
				pm.Usable = true
				pm.Detail = fmt.Sprintf("%s at %s, %s %s present", c.name, p, c.dbKind, db)
				return pm
			}
		}
		pm.Detail = fmt.Sprintf("%s at %s but no %s (looked for %s)", c.name, p, c.dbKind, strings.Join(c.dbs, ", "))
		if firstFound == nil {
			firstFound = &pm
		}
	}
	if firstFound != nil {
		return *firstFound
	}
	return PackageManager{Detail: fmt.Sprintf("none of apt-get, tdnf, dnf in %s", strings.Join(toolDirs, ", "))}
}

// SELinux is the SELinux mode and the file it was read from.
type SELinux struct {
	Mode   string // "enforcing", "permissive", "disabled", or "" when neither file exists
	Source string // path inside the root; "" when Mode is ""
}

// DetectSELinux prefers the kernel's current mode (selinuxfs) over the
// config, because the config only takes effect at the next boot. In an
// image tree selinuxfs is absent, so the config is what the image will
// boot with.
func DetectSELinux(root string) SELinux {
	const enforce = "/sys/fs/selinux/enforce"
	if host, err := fsroot.Resolve(root, enforce); err == nil {
		if b, err := os.ReadFile(host); err == nil {
			switch strings.TrimSpace(string(b)) {
			case "1":
				return SELinux{"enforcing", enforce}
			case "0":
				return SELinux{"permissive", enforce}
			}
		}
	}
	const config = "/etc/selinux/config"
	host, err := fsroot.Resolve(root, config)
	if err != nil {
		return SELinux{}
	}
	f, err := openRegular(host)
	if err != nil {
		return SELinux{}
	}
	defer f.Close()
	mode := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != "SELINUX" {
			continue
		}
		v = strings.ToLower(strings.Trim(strings.TrimSpace(v), `"'`))
		switch v {
		case "enforcing", "permissive", "disabled":
			mode = v
		}
	}
	if mode == "" {
		return SELinux{}
	}
	return SELinux{mode, config}
}

// Systemd is what the systemd probe found.
type Systemd struct {
	Present bool
	Path    string // the systemd binary inside the root
	// PID1 is true when the proc tree shows systemd as PID 1; PID1Probed
	// says whether that was looked at, so false is never a guess.
	PID1       bool
	PID1Probed bool
	PID1Comm   string
	Version    int // 0 when unknown
	Notes      []string
}

var systemdBinaries = []string{"/usr/lib/systemd/systemd", "/lib/systemd/systemd"}

// Systemd probes for systemd in the tree, PID 1 in the proc tree, and the
// version from systemctl (running host only).
func (p *Prober) Systemd(ctx context.Context) Systemd {
	var s Systemd
	for _, b := range systemdBinaries {
		if isExecutable(p.root(), b) {
			s.Present, s.Path = true, b
			break
		}
	}
	if !s.Present {
		s.Notes = append(s.Notes, fmt.Sprintf("systemd not found at %s", strings.Join(systemdBinaries, " or ")))
	}

	if d := p.procDir(); d == "" {
		s.Notes = append(s.Notes, "systemd PID 1 not probed: --root is not /")
	} else {
		commPath := filepath.Join(d, "1", "comm")
		b, err := os.ReadFile(commPath)
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("systemd PID 1 not probed: %v", err))
		} else {
			s.PID1Probed = true
			s.PID1Comm = strings.TrimSpace(string(b))
			s.PID1 = s.PID1Comm == "systemd"
			if !s.PID1 {
				s.Notes = append(s.Notes, fmt.Sprintf("PID 1 is %q, not systemd (%s)", s.PID1Comm, commPath))
			}
		}
	}

	if !p.live() {
		s.Notes = append(s.Notes, "systemd.version not probed: --root is not /")
		return s
	}
	ctl, ok := p.LookTool("systemctl")
	if !ok {
		s.Notes = append(s.Notes, "systemd.version unknown: systemctl not found")
		return s
	}
	out, err := p.run(ctx, ctl, "--version")
	if err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("systemd.version unknown: %v", err))
		return s
	}
	v, err := ParseSystemctlVersion(out)
	if err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("systemd.version unknown: %s --version: %v", ctl, err))
		return s
	}
	s.Version = v
	return s
}

// ParseSystemctlVersion reads the major version from the first line of
// `systemctl --version`, e.g. "systemd 252 (252.39-1~deb12u2)" gives 252.
func ParseSystemctlVersion(out []byte) (int, error) {
	first, _, _ := bytes.Cut(out, []byte("\n"))
	f := strings.Fields(string(first))
	if len(f) < 2 || f[0] != "systemd" {
		return 0, fmt.Errorf("unexpected first line %q", clip(string(first)))
	}
	// Tolerate suffixes some builds add to the number ("256~rc3").
	digits := f[1]
	for i, c := range digits {
		if c < '0' || c > '9' {
			digits = digits[:i]
			break
		}
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("unexpected version %q in %q", f[1], clip(string(first)))
	}
	return v, nil
}

// Nspawn is what the machine tooling probe found.
type Nspawn struct {
	Present        bool   // systemd-nspawn
	Path           string // inside the root
	Machinectl     bool
	MachinectlPath string
}

// DetectNspawn looks for systemd-nspawn and machinectl, which distributions
// package separately (Debian and Ubuntu: systemd-container).
func DetectNspawn(root string) Nspawn {
	var n Nspawn
	n.Path, n.Present = LookTool(root, "systemd-nspawn")
	n.MachinectlPath, n.Machinectl = LookTool(root, "machinectl")
	return n
}

// sysextMarkers are path fragments that appear in the layers of an overlay
// merged by systemd-sysext: its workspace under /run and the directories
// it searches for extension images.
var sysextMarkers = []string{
	"/run/systemd/sysext",
	"/run/extensions",
	"/var/lib/extensions",
	"/etc/extensions",
	"/usr/lib/extensions",
	"/usr/local/lib/extensions",
	"/.extra/sysext",
}

// sysextWorkspace is where systemd-sysext keeps its state while merged.
const sysextWorkspace = "/run/systemd/sysext"

// Sysext is the evidence that a path is covered by a systemd-sysext overlay.
type Sysext struct {
	Path       string
	Covered    bool
	MountPoint string // the overlay's mount point when Covered
	Evidence   []string
}

// DetectSysext decides whether path is served by a systemd-sysext overlay.
// The heuristic, strongest evidence first:
//
//   - the covering mount is overlayfs with source "sysext", the name
//     systemd-sysext gives its overlay;
//   - or its lowerdir/upperdir names a sysext location (sysextMarkers);
//   - or it is an overlay at /usr or /opt (the hierarchies sysext merges)
//     while the sysext workspace exists (workspaceExists).
//
// Anything else, including an overlay elsewhere, is not treated as sysext.
// It matters because sysext overlays are read-only and are replaced
// wholesale on refresh: files written under them vanish or never land.
func DetectSysext(mounts []Mount, p string, workspaceExists bool) Sysext {
	s := Sysext{Path: p}
	m := MountFor(mounts, p)
	if m.FSType != "overlay" {
		return s
	}
	if m.Source == "sysext" {
		s.Evidence = append(s.Evidence, fmt.Sprintf("overlay at %s has source %q", m.MountPoint, m.Source))
	}
	for _, key := range []string{"lowerdir", "upperdir"} {
		v, ok := m.SuperOption(key)
		if !ok {
			continue
		}
		for _, mk := range sysextMarkers {
			if strings.Contains(v, mk) {
				s.Evidence = append(s.Evidence, fmt.Sprintf("overlay at %s has %s mentioning %s", m.MountPoint, key, mk))
				break
			}
		}
	}
	if len(s.Evidence) == 0 && workspaceExists && (m.MountPoint == "/usr" || m.MountPoint == "/opt") {
		s.Evidence = append(s.Evidence, fmt.Sprintf("overlay at %s while %s exists", m.MountPoint, sysextWorkspace))
	}
	if len(s.Evidence) > 0 {
		s.Covered, s.MountPoint = true, m.MountPoint
	}
	return s
}

// Sysext is DetectSysext with the mount table and workspace of p's host.
func (p *Prober) Sysext(path string) (Sysext, error) {
	mounts, err := p.Mounts()
	if err != nil {
		return Sysext{Path: path}, fmt.Errorf("sysext %s: %w", path, err)
	}
	return DetectSysext(mounts, path, isDir(p.root(), sysextWorkspace)), nil
}

// Cgroup modes, as CgroupMode reports them.
const (
	CgroupV2     = "v2"
	CgroupHybrid = "hybrid"
	CgroupV1     = "v1"
)

const cgroupRoot = "/sys/fs/cgroup"

// CgroupMode tells the unified (cgroup2 at /sys/fs/cgroup), hybrid (v1
// controllers plus cgroup2 at /sys/fs/cgroup/unified) and legacy layouts
// apart, or returns "" when the mount table shows no cgroup mounts. The
// nspawn machine must use the host's mode (SYSTEMD_NSPAWN_UNIFIED_HIERARCHY):
// with the wrong one, pods fail to start.
func CgroupMode(mounts []Mount) string {
	top := ""
	v1, unified := false, false
	for _, m := range mounts {
		mp := path.Clean(m.MountPoint)
		switch {
		case mp == cgroupRoot:
			top = m.FSType // later lines are on top
		case under(mp, cgroupRoot) && m.FSType == "cgroup":
			v1 = true
		case mp == cgroupRoot+"/unified" && m.FSType == "cgroup2":
			unified = true
		}
	}
	switch {
	case top == "cgroup2":
		return CgroupV2
	case v1 && unified:
		return CgroupHybrid
	case v1:
		return CgroupV1
	}
	return ""
}

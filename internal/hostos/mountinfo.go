package hostos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (proc(5)).
type Mount struct {
	ID         int
	ParentID   int
	MajorMinor string
	Root       string // path inside the filesystem that is mounted here
	MountPoint string
	Options    []string // per-mount options (ro, nosuid, noexec, ...)
	Optional   []string // shared:N, master:N, ...
	FSType     string
	Source     string
	// SuperOptions are the filesystem's own options; for overlayfs they
	// carry lowerdir=, which is how sysext overlays are recognised.
	SuperOptions []string
}

// ReadOnly reports whether writes through this mount fail: either the mount
// itself or the whole superblock is read-only.
func (m Mount) ReadOnly() bool {
	return hasOpt(m.Options, "ro") || hasOpt(m.SuperOptions, "ro")
}

// NoExec reports whether binaries on this mount cannot be executed, which
// matters for where the agent binary may live.
func (m Mount) NoExec() bool { return hasOpt(m.Options, "noexec") }

// SuperOption returns the value of key=value in the super options.
func (m Mount) SuperOption(key string) (string, bool) {
	for _, o := range m.SuperOptions {
		if k, v, ok := strings.Cut(o, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// ReadMountInfo reads and parses a mountinfo file (/proc/<pid>/mountinfo,
// or a copy of one). Errors name the file.
func ReadMountInfo(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := ParseMountInfo(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// ParseMountInfo parses the /proc/self/mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// The kernel octal-escapes space, tab, newline and backslash (\040 ...) in
// paths and options; those are decoded. Options are split before decoding
// so an escaped comma stays inside its option. Unlike os-release, a
// malformed line is an error: the kernel wrote this file, so a bad line
// means we are reading something else.
func ParseMountInfo(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // overlay lowerdir lists get long
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMountLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", lineNo, err)
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

func parseMountLine(line string) (Mount, error) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 10 || sep < 0 || len(f) < sep+4 {
		return Mount{}, fmt.Errorf("want 6 fields, optional fields, '-', 3 fields; got %q", clip(line))
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(f[0]); err != nil {
		return Mount{}, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	if m.ParentID, err = strconv.Atoi(f[1]); err != nil {
		return Mount{}, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	m.MajorMinor = f[2]
	m.Root = unescapeOctal(f[3])
	m.MountPoint = unescapeOctal(f[4])
	m.Options = splitOptions(f[5])
	m.Optional = append([]string{}, f[6:sep]...)
	m.FSType = unescapeOctal(f[sep+1])
	m.Source = unescapeOctal(f[sep+2])
	// Super options never contain a raw space, but be tolerant of a
	// source that did and rejoin whatever is left.
	m.SuperOptions = splitOptions(strings.Join(f[sep+3:], " "))
	return m, nil
}

func splitOptions(s string) []string {
	if s == "" {
		return []string{}
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = unescapeOctal(p)
	}
	return parts
}

// unescapeOctal decodes the kernel's \ooo escapes; anything else is kept
// verbatim, since the kernel escapes only with exactly three octal digits.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			if v := int(s[i+1]-'0')<<6 | int(s[i+2]-'0')<<3 | int(s[i+3]-'0'); v <= 0xff {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// MountFor returns the mount that serves path: the one whose mount point is
// the longest component-wise prefix of it (/usr/local/bin is served by
// /usr/local, not by /usr, and /usrx is not under /usr). When mounts are
// stacked on one mount point the later line wins, because it is on top.
// The zero Mount is returned when nothing matches.
func MountFor(mounts []Mount, p string) Mount {
	p = path.Clean("/" + p)
	var best Mount
	bestLen := -1
	for _, m := range mounts {
		mp := path.Clean(m.MountPoint)
		if !under(p, mp) {
			continue
		}
		if len(mp) >= bestLen {
			best, bestLen = m, len(mp)
		}
	}
	return best
}

// under reports whether p is dir or inside it, comparing whole components.
func under(p, dir string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

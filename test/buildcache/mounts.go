package buildcache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mount is one line of a mountinfo file, reduced to what the tests use.
type Mount struct {
	Target  string
	FSType  string
	Options string // per-mount options (ro/rw, ...)
	Super   string // super block options (for cgroup v1: the controllers)
}

// ReadMountInfo parses a mountinfo file (/proc/<pid>/mountinfo).
func ReadMountInfo(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mps, err := ParseMountInfo(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mps, nil
}

// ParseMountInfo parses the mountinfo format of proc(5).
func ParseMountInfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root target options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		out = append(out, Mount{
			Target:  unescapeMount(fields[4]),
			Options: fields[5],
			FSType:  fields[sep+1],
			Super:   fields[len(fields)-1],
		})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space, \134 for a
// backslash, ...) the kernel applies to mountinfo fields.
//
// TODO(issue 12): use the unescaper internal/hostos exports once it lands;
// until then this is the tests' only copy.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsBelow returns the mount points at or below dir in this process's
// mount namespace, deepest first.
func MountsBelow(dir string) ([]string, error) {
	mps, err := ReadMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mps {
		if m.Target == dir || strings.HasPrefix(m.Target, dir+"/") {
			out = append(out, m.Target)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// Unmount unmounts target, retrying while busy and detaching lazily as the
// last resort so that a stuck reader cannot leave the mount behind. A target
// that is not mounted is not an error.
func Unmount(target string) error {
	var err error
	for range 50 {
		err = syscall.Unmount(target, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if derr := syscall.Unmount(target, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %w (lazy: %v)", target, err, derr)
	}
	return nil
}

// RemoveAllSafe removes dir after unmounting everything mounted below it.
// os.RemoveAll crosses mount points: the proc or sys an interrupted
// debootstrap left mounted in its target, or a test host's overlay, would
// otherwise be emptied along with it.
func RemoveAllSafe(dir string) error {
	if dir == "" || filepath.Clean(dir) == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	mps, err := MountsBelow(real)
	if err != nil {
		return err
	}
	for _, m := range mps {
		if err := Unmount(m); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	if mps, err = MountsBelow(real); err != nil {
		return err
	} else if len(mps) > 0 {
		return fmt.Errorf("remove %s: still mounted below it: %s", dir, strings.Join(mps, ", "))
	}
	return os.RemoveAll(abs)
}

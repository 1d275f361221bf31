package aclhost

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// mountPoint is one line of /proc/self/mountinfo, reduced to what we use.
type mountPoint struct {
	Target  string
	FSType  string
	Options string // per-mount options (ro/rw, ...)
	Super   string // super block options (for cgroup v1: the controllers)
}

// unescapeMount undoes the octal escaping the kernel applies to mountinfo fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readMountInfo parses a mountinfo file (/proc/<pid>/mountinfo).
func readMountInfo(path string) ([]mountPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

func parseMountInfo(r io.Reader) ([]mountPoint, error) {
	var out []mountPoint
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
		out = append(out, mountPoint{
			Target:  unescapeMount(fields[4]),
			Options: fields[5],
			FSType:  fields[sep+1],
			Super:   fields[len(fields)-1],
		})
	}
	return out, sc.Err()
}

// mountsBelow returns the mount points at or below dir in our mount
// namespace, deepest first.
func mountsBelow(dir string) ([]string, error) {
	mps, err := readMountInfo("/proc/self/mountinfo")
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

// unmount unmounts target, retrying while busy and detaching lazily as the
// last resort so that a stuck reader cannot leave the mount behind.
func unmount(target string) error {
	var err error
	for i := 0; i < 50; i++ {
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

// removeAllSafe removes dir after unmounting everything mounted below it.
// os.RemoveAll crosses mount points; a forgotten bind mount of /dev or /proc
// under a build tree would otherwise be emptied along with it.
func removeAllSafe(dir string) error {
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
	mps, err := mountsBelow(real)
	if err != nil {
		return err
	}
	for _, m := range mps {
		if err := unmount(m); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
	}
	if mps, err = mountsBelow(real); err != nil {
		return err
	} else if len(mps) > 0 {
		return fmt.Errorf("remove %s: still mounted below it: %s", dir, strings.Join(mps, ", "))
	}
	return os.RemoveAll(abs)
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

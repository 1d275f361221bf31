package buildcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// MountsBelow returns the mount points at or below dir in this process's
// mount namespace, deepest first.
func MountsBelow(dir string) ([]string, error) {
	mps, err := hostos.ReadMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mps {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m.MountPoint)
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

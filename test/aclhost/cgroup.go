package aclhost

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// hostCgroups are the cgroups one test host runs in, one per mounted
// hierarchy, each a child of the test binary's own cgroup there.
//
// Without them every host lands in the same place: with --keep-unit and no
// systemd outside, systemd-nspawn puts the machine in "payload" below its
// own cgroup, so two hosts would share one systemd cgroup tree (and stopping
// a unit in one would kill the other's processes), and the kubelets of two
// hosts would share /kubepods. Children of our own cgroup keep the hosts
// inside whatever limits the test run was given.
type hostCgroups struct {
	dirs []string // created cgroup directories
}

// procsFiles lists the cgroup.procs files a process joins to enter them.
func (c *hostCgroups) procsFiles() []string {
	var out []string
	for _, d := range c.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

type cgroupLine struct {
	controllers []string // empty for the v2 unified hierarchy
	path        string
}

func selfCgroups() ([]cgroupLine, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		l := cgroupLine{path: parts[2]}
		if parts[1] != "" {
			l.controllers = strings.Split(parts[1], ",")
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// hierarchyMount finds where the hierarchy of l is mounted.
func hierarchyMount(mps []hostos.Mount, l cgroupLine) string {
	for _, m := range mps {
		if len(l.controllers) == 0 {
			if m.FSType == "cgroup2" {
				return m.MountPoint
			}
			continue
		}
		if m.FSType != "cgroup" {
			continue
		}
		opts := map[string]bool{}
		for _, o := range m.SuperOptions {
			opts[o] = true
		}
		all := true
		for _, c := range l.controllers {
			all = all && opts[c]
		}
		if all {
			return m.MountPoint
		}
	}
	return ""
}

// newHostCgroups creates a cgroup named name below our own in every
// hierarchy. The systemd (name=systemd) and unified hierarchies are required;
// a v1 controller that cannot be used is skipped with a log line.
func newHostCgroups(name string, logf func(string, ...any)) (*hostCgroups, error) {
	lines, err := selfCgroups()
	if err != nil {
		return nil, err
	}
	mps, err := hostos.ReadMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	c := &hostCgroups{}
	for _, l := range lines {
		mnt := hierarchyMount(mps, l)
		required := len(l.controllers) == 0 || (len(l.controllers) == 1 && l.controllers[0] == "name=systemd")
		if mnt == "" {
			if required {
				c.remove()
				return nil, fmt.Errorf("cgroup hierarchy %q of this process is not mounted", strings.Join(l.controllers, ","))
			}
			continue
		}
		parent := filepath.Join(mnt, l.path)
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			if required {
				c.remove()
				return nil, fmt.Errorf("create cgroup: %w", err)
			}
			logf("test host %s: not using cgroup %s: %v", name, dir, err)
			continue
		}
		c.dirs = append(c.dirs, dir)
		// A new v1 cpuset is empty and cannot take tasks until given CPUs
		// and memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					c.remove()
					return nil, fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	return c, nil
}

// remove deletes the cgroups and everything the host's systemd created in
// them, deepest first. Processes must be gone; a dying one can keep a cgroup
// busy for a moment, so retry briefly.
func (c *hostCgroups) remove() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, d := range c.dirs {
		var subdirs []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				subdirs = append(subdirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(subdirs)))
		for _, s := range subdirs {
			var err error
			for i := 0; i < 50; i++ {
				if err = syscall.Rmdir(s); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				if !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", s, err))
			}
		}
	}
	c.dirs = nil
	return errors.Join(errs...)
}

// kill sends SIGKILL to every process in the cgroups, all the way down.
func (c *hostCgroups) kill() {
	if c == nil {
		return
	}
	for _, d := range c.dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// suggestedPrefix is the prefix preflight proposes when the default layout
// cannot be installed: /opt is writable on every image-based host we
// support (ACL, Flatcar), and it is what the ACL example config declares.
const suggestedPrefix = layout.SuggestedPrefix

// execProbeTimeout bounds the run of the probe executable; /bin/sh
// printing nothing takes milliseconds.
const execProbeTimeout = 10 * time.Second

func hostLayoutCheck(e *Env) Check {
	return NewCheck(NameHostLayout, strings.Join(e.Layout.Dirs(), ", "), func(ctx context.Context) Result {
		return e.checkHostLayout(ctx)
	})
}

// dirVerdict is what checking one layout directory found.
type dirVerdict struct {
	dir      string
	ancestor string // nearest existing ancestor, inside the root
	resolved string // ancestor after symlinks, inside the root
	problem  string // why the agent cannot use dir; "" when it can
	noMounts bool   // the mount table was not read
}

// checkLayoutDir decides whether dir can be created (or written, if it
// exists) and, when exec is set, hold executables, by looking at the
// nearest existing ancestor: that is the directory a "mkdir -p" would write
// into, and the mount covering it is the one the new files would land on.
func (e *Env) checkLayoutDir(dir string, exec bool) dirVerdict {
	v := dirVerdict{dir: dir}
	anc, err := e.Prober.NearestExistingAncestor(dir)
	if err != nil {
		v.problem = fmt.Sprintf("%s: %v", dir, err)
		return v
	}
	v.ancestor = anc
	where := "exists, but"
	if anc != dir {
		where = "would be created in " + anc + ", but"
	}
	c, err := e.Prober.CheckDir(anc)
	if err != nil {
		v.problem = fmt.Sprintf("%s: %v", dir, err)
		return v
	}
	v.resolved = c.Resolved
	v.noMounts = c.Mount == nil
	switch {
	case c.Mount != nil && c.Mount.ReadOnly():
		v.problem = fmt.Sprintf("%s: %s %s is mounted read-only (%s %s)", dir, where, c.Mount.MountPoint, c.Mount.FSType, c.Mount.Source)
	case !c.Writable:
		v.problem = fmt.Sprintf("%s: %s %s", dir, where, c.Reason)
	case exec && c.Mount != nil && c.Mount.NoExec():
		v.problem = fmt.Sprintf("%s: %s %s is mounted noexec, so the agent could not run from it (%s %s)", dir, where, c.Mount.MountPoint, c.Mount.FSType, c.Mount.Source)
	}
	return v
}

func (e *Env) checkHostLayout(ctx context.Context) Result {
	l := e.Layout
	cfg := e.configFile()
	desc := fmt.Sprintf("layout of agent.hostPrefix %q from %s", l.Prefix(), cfg)
	if l.Prefix() == "" {
		desc = fmt.Sprintf("default layout (agent.hostPrefix is empty in %s)", cfg)
	}

	var problems, remedies []string
	noMounts := false
	prefixBroken := false
	var binVerdict dirVerdict
	for _, dir := range l.Dirs() {
		exec := dir == l.BinDir() || dir == l.LibDir()
		v := e.checkLayoutDir(dir, exec)
		noMounts = noMounts || v.noMounts
		if dir == l.BinDir() {
			binVerdict = v
		}
		if v.problem == "" {
			continue
		}
		problems = append(problems, v.problem)
		switch dir {
		case l.BinDir(), l.LibDir():
			prefixBroken = true
		case l.StateDir():
			remedies = append(remedies, fmt.Sprintf("make %s writable: the state dir does not move with the prefix", path.Dir(l.StateDir())))
		case l.LogDir():
			remedies = append(remedies, fmt.Sprintf("set agent.logDir in %s to a writable directory", cfg))
		}
	}

	// The only write preflight makes: what the mount table cannot tell
	// (an LSM policy, a filesystem that ignores the exec bit, a mount
	// table we could not read) shows when an executable is actually run.
	probed := ""
	if binVerdict.problem == "" && binVerdict.resolved != "" {
		if err := e.probeExec(ctx, binVerdict.resolved); err != nil {
			problems = append(problems, fmt.Sprintf("%s: a test executable created in %s could not be run: %v", l.BinDir(), binVerdict.ancestor, err))
			prefixBroken = true
		} else {
			probed = binVerdict.ancestor
		}
	}

	if prefixBroken {
		remedies = append([]string{e.prefixRemedy()}, remedies...)
	}
	if len(problems) > 0 {
		return Error(strings.Join(remedies, "; "), "%s cannot be installed: %s", desc, strings.Join(problems, "; "))
	}

	if r, ok := e.sysextWarning(); ok {
		return r
	}
	msg := fmt.Sprintf("%s: %s writable", desc, strings.Join(l.Dirs(), ", "))
	if probed != "" {
		msg += fmt.Sprintf("; a test executable ran from %s", probed)
	}
	if noMounts {
		msg += "; mount table not read, so read-only and noexec mounts were judged by access(2) and the test executable only"
	}
	return OK("%s", msg)
}

// prefixRemedy says which prefix to declare. It proposes suggestedPrefix
// only after checking that it would work here; preflight never relocates
// anything itself (the prefix is declared, never inferred).
func (e *Env) prefixRemedy() string {
	cfg := e.configFile()
	if e.Layout.Prefix() != suggestedPrefix {
		cand, err := layout.New(e.Root, suggestedPrefix, "")
		if err == nil {
			bin := e.checkLayoutDir(cand.BinDir(), true)
			lib := e.checkLayoutDir(cand.LibDir(), true)
			if bin.problem == "" && lib.problem == "" && !e.sysextCovers(suggestedPrefix) {
				return fmt.Sprintf("set agent.hostPrefix, e.g. %s, in %s (the prefix is declared, never inferred; preflight does not relocate files)", suggestedPrefix, cfg)
			}
		}
	}
	return fmt.Sprintf("set agent.hostPrefix in %s to a directory on a writable filesystem mounted without noexec (%s would not work on this host either)", cfg, suggestedPrefix)
}

func underDir(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

const optDir = "/opt"

func (e *Env) sysextCovers(prefix string) bool {
	if !underDir(prefix, optDir) {
		return false
	}
	s, err := e.Prober.Sysext(prefix)
	return err == nil && s.Covered
}

// sysextWarning: a systemd-sysext overlay on /opt hides whatever is
// written under it while merged and is replaced wholesale on refresh, so a
// prefix there works today and loses the agent binary later.
func (e *Env) sysextWarning() (Result, bool) {
	p := e.Layout.Prefix()
	if !underDir(p, optDir) {
		return Result{}, false
	}
	s, err := e.Prober.Sysext(p)
	if err != nil || !s.Covered {
		return Result{}, false
	}
	return Warning(
		fmt.Sprintf("set agent.hostPrefix in %s to a directory outside the sysext overlay, or stop merging extensions into %s", e.configFile(), optDir),
		"agent.hostPrefix %s is under %s, which is covered by a systemd-sysext overlay at %s (%s): files written there are hidden or lost when extensions are merged or refreshed",
		p, optDir, s.MountPoint, strings.Join(s.Evidence, "; ")), true
}

// probeExec creates a temp dir in dir (inside the root), writes a shell
// script into it, runs it and removes the temp dir, whatever happened.
func (e *Env) probeExec(ctx context.Context, dir string) (err error) {
	host, err := e.onRoot(dir)
	if err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	tmp, err := os.MkdirTemp(host, ".aks-flex-node-preflight-")
	if err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", tmp, rerr))
		}
	}()
	script := filepath.Join(tmp, "probe")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", script, err)
	}
	ctx, cancel := context.WithTimeout(ctx, execProbeTimeout)
	defer cancel()
	if err := e.RunExecutable(ctx, script); err != nil {
		return fmt.Errorf("run %s: %w", script, err)
	}
	return nil
}

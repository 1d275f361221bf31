package buildcache

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// rootfsScript is build-rootfs.sh; embedding it means a key and the build
// always use the script this package was compiled with, wherever the test
// binary runs from.
//
//go:embed build-rootfs.sh
var rootfsScript []byte

// Rootfs describes a Debian root file system for Debootstrap. Everything in
// it, and the script, is part of AddTo's key; the mirror is not (any mirror
// serves the same suite).
type Rootfs struct {
	// Suite defaults to bookworm.
	Suite string
	// Packages are installed on top of debootstrap's minbase.
	Packages []string
	// Mask are units masked besides the ones every test tree masks (see
	// build-rootfs.sh).
	Mask []string
}

func (r Rootfs) suite() string {
	if r.Suite == "" {
		return "bookworm"
	}
	return r.Suite
}

// AddTo adds everything the tree is derived from to k.
func (r Rootfs) AddTo(k *Key) *Key {
	return k.Add("suite", r.suite()).
		Add("packages", strings.Join(r.Packages, ",")).
		Add("mask", strings.Join(r.Mask, " ")).
		Add("script", string(rootfsScript))
}

// Debootstrap builds the tree into out (which must not exist or be empty)
// with build-rootfs.sh, writing its output to logPath. On failure the error
// carries the log's tail; the partial tree is left for the caller (Ensure
// removes it before the next attempt).
func (r Rootfs) Debootstrap(ctx context.Context, logf Logf, out, logPath string) error {
	if len(r.Packages) == 0 {
		return fmt.Errorf("debootstrap %s: no packages", out)
	}
	script := filepath.Join(filepath.Dir(out), "build-rootfs.sh")
	if err := os.WriteFile(script, rootfsScript, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "/bin/bash", script, out)
	cmd.Env = append(os.Environ(),
		"ROOTFS_SUITE="+r.suite(),
		"ROOTFS_PACKAGES="+strings.Join(r.Packages, ","),
		"ROOTFS_MASK="+strings.Join(r.Mask, " "))
	if err := RunLogged(cmd, logFile, logf, "build-rootfs:"); err != nil {
		tail, _ := TailFile(logPath, 30)
		return fmt.Errorf("build rootfs: %s %s: %w\n%s", script, out, err, tail)
	}
	logf.Printf("  debootstrap of %s done in %s", out, time.Since(start).Round(time.Second))
	return logFile.Close()
}

// AptMirror returns the archive this machine's apt is configured to fetch
// suite's main component from (build-rootfs.sh --print-mirror, which
// honours ROOTFS_MIRROR), failing with the source files it read when none
// serves the suite. No mirror is written in this repository.
func AptMirror(ctx context.Context, suite string) (string, error) {
	dir, err := os.MkdirTemp("", "build-rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "build-rootfs.sh")
	if err := os.WriteFile(script, rootfsScript, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "/bin/bash", script, "--print-mirror")
	cmd.Env = append(os.Environ(), "ROOTFS_SUITE="+suite)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("apt mirror for %s: %w: %s", suite, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Package ignitiontest runs the real Ignition (Debian's ignition package)
// on a fresh test host root, as the initramfs does before a first boot:
// what the ignition and fleet end-to-end tests share.
package ignitiontest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// Binary is where Debian's ignition package ships the real binary (it is
// meant for the initramfs; it runs just as well on a directory).
const Binary = "/usr/lib/dracut/modules.d/30ignition/ignition"

// Require fails unless Debian's Ignition and what it runs are installed.
func Require(t *testing.T) {
	aclhost.RequireE2E(t)
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("the real Ignition is needed: %v (apt-get install ignition; scripts/ci-deps.sh does)", err)
	}
	// Debian's Ignition is built with SELinux relabeling on: after the
	// files stage it runs setfiles(8) on what it wrote.
	if _, err := exec.LookPath("setfiles"); err != nil {
		t.Fatalf("setfiles is needed by Debian's Ignition: %v (apt-get install policycoreutils; scripts/ci-deps.sh does)", err)
	}
}

// FreshRoot makes root look like an image that has never booted, as
// Ignition expects it: no machine-id, so systemd treats the next boot as
// the first and applies the presets Ignition writes (that is how units get
// enabled); and, since Debian's Ignition relabels what it wrote and reads
// the policy name from the image, an empty SELinux file_contexts that
// labels nothing (the host has no policy).
func FreshRoot(root string) error {
	if err := os.Remove(filepath.Join(root, "etc/machine-id")); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/selinux/targeted/contexts/files"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/selinux/config"), []byte("SELINUX=disabled\nSELINUXTYPE=targeted\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "etc/selinux/targeted/contexts/files/file_contexts"), nil, 0o644)
}

// Run runs the real Ignition against root, as the initramfs does on first
// boot: fetch (the file platform reads IGNITION_CONFIG_FILE), then files.
// dir holds its cache and state.
func Run(t testing.TB, dir, config, root string) error {
	for _, stage := range []string{"fetch", "files"} {
		cmd := exec.Command(Binary, "-platform", "file", "-stage", stage, "-root", root,
			"-config-cache", filepath.Join(dir, "ignition.json"), "-state-file", filepath.Join(dir, "ignition.state"),
			"-log-to-stdout")
		cmd.Env = append(os.Environ(), "IGNITION_CONFIG_FILE="+config)
		out, err := cmd.CombinedOutput()
		// Ignition prints the whole config on failure (with the bootstrap
		// token in it); log only its own lines.
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "Full config:") {
				break
			}
			lines = append(lines, l)
		}
		t.Logf("ignition -stage %s:\n%s", stage, strings.Join(lines, "\n"))
		if err != nil {
			return fmt.Errorf("ignition -stage %s: %w", stage, err)
		}
	}
	return nil
}

package agentupgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// Slot names are the base names of the layout's slot paths. The links hold
// these relative names, not absolute paths, so a tree baked under --root
// and the live host read the same links the same way.
func slotNames(l layout.Layout) [2]string {
	return [2]string{filepath.Base(l.UpgradeSlots().Blue), filepath.Base(l.UpgradeSlots().Green)}
}

func validSlot(l layout.Layout, name string) bool {
	n := slotNames(l)
	return name == n[0] || name == n[1]
}

// other returns the slot that is not name.
func other(l layout.Layout, name string) string {
	n := slotNames(l)
	if name == n[0] {
		return n[1]
	}
	return n[0]
}

func slotPath(l layout.Layout, name string) string { return l.OnRoot(l.LibDir() + "/" + name) }

// linkSlot returns the slot a link (current or last-good) names, checking
// that it is one of the two slots and an executable regular file. "" with
// a nil error means the link does not exist.
func linkSlot(l layout.Layout, link string) (string, error) {
	target, err := os.Readlink(l.OnRoot(link))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", link, err)
	}
	if !validSlot(l, target) {
		return "", fmt.Errorf("link %s names %q, which is not a slot (want %s or %s)", link, target, slotNames(l)[0], slotNames(l)[1])
	}
	if err := executable(slotPath(l, target)); err != nil {
		return "", fmt.Errorf("link %s names slot %s: %w", link, target, err)
	}
	return target, nil
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file (mode %s)", path, fi.Mode())
	}
	return nil
}

func pointLink(l layout.Layout, link, slot string) (bool, error) {
	return fsutil.SymlinkAtomic(slot, l.OnRoot(link))
}

func fileSHA256(path string) (string, error) {
	sum, _, err := fsutil.FileSHA256(path)
	return sum, err
}

// TestRun runs `<bin> version --output json` and returns the version it
// reports. A candidate that cannot do this is never named by a link.
func TestRun(ctx context.Context, bin string) (buildinfo.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// The candidate was just written; see fsutil.RunFresh.
	err := fsutil.RunFresh(ctx, func() *exec.Cmd {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.CommandContext(ctx, bin, "version", "--output", "json")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd
	})
	if err != nil {
		return buildinfo.Info{}, fmt.Errorf("test-run %s version --output json: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	var info buildinfo.Info
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return buildinfo.Info{}, fmt.Errorf("test-run %s version --output json: output is not version JSON: %w", bin, err)
	}
	if err := checkVersion(info.Version); err != nil {
		return buildinfo.Info{}, fmt.Errorf("test-run %s: %w", bin, err)
	}
	return info, nil
}

// checkVersion keeps versions to the bytes a record line and the recovery
// script can carry verbatim.
func checkVersion(v string) error {
	if v == "" {
		return errors.New("reports no version")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == '_') {
			return fmt.Errorf("reports version %q, which holds %q", v, c)
		}
	}
	return nil
}

// SeedResult says what Seed did.
type SeedResult struct {
	Changed bool
	// Adopted is set when a new binary placed at agentBinary (install.sh on
	// a seeded host, or an image that ships a newer one) became current
	// and last-good: the agent must be restarted to run it.
	Adopted bool
	Slot    string
}

// Seed makes the slots and links exist, from the binary at the layout's
// agentBinary on first install, and makes agentBinary resolve to the
// current slot.
//
// agentBinary becomes a symlink to the `current` link, not to a slot: a
// switch is then one rename of `current`, and the CLI on PATH and the
// daemon (whose unit runs `current`) can never name different binaries,
// not even between two steps of an upgrade. A symlink rather than a copy
// also means nothing at agentBinary has to be rewritten on upgrade, which
// matters where binDir and libDir are on different filesystems.
//
// install.sh replaces agentBinary by rename, which replaces the link itself
// and never writes through it into a slot. On a seeded host that leaves a
// regular file there; Seed then adopts it: it is copied into the free slot,
// test-run, made current and last-good (an operator installing a binary by
// hand is a deliberate choice, not an upgrade to be confirmed), and the
// link is restored. Seed refuses to adopt while an upgrade is in flight.
func Seed(ctx context.Context, l layout.Layout) (SeedResult, error) {
	var res SeedResult
	bin := l.OnRoot(l.AgentBinary())
	if err := fsutil.MkdirAll(l.OnRoot(l.LibDir()), 0o755); err != nil {
		return res, fmt.Errorf("seed slots: %w", err)
	}
	unlock, err := lockLinks(l, linksLockWait)
	if err != nil {
		return res, fmt.Errorf("seed slots: %w", err)
	}
	defer unlock()
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil {
		return res, fmt.Errorf("seed slots: %w", err)
	}
	good, err := linkSlot(l, l.UpgradeSlots().LastGood)
	if err != nil {
		return res, fmt.Errorf("seed slots: %w", err)
	}
	fi, statErr := os.Lstat(bin)
	regular := statErr == nil && fi.Mode().IsRegular()
	switch {
	case cur == "" && good == "":
		// First install.
		if !regular {
			return res, fmt.Errorf("seed slots: no agent binary at %s (prefix %q): install it first (install.sh, or place the binary there)", l.AgentBinary(), l.Prefix())
		}
		slot := slotNames(l)[0]
		if err := copyIntoSlot(ctx, l, bin, slot); err != nil {
			return res, fmt.Errorf("seed slots: %w", err)
		}
		for _, link := range []string{l.UpgradeSlots().LastGood, l.UpgradeSlots().Current} {
			if _, err := pointLink(l, link, slot); err != nil {
				return res, fmt.Errorf("seed slots: %w", err)
			}
		}
		res.Changed, res.Slot = true, slot
	case cur == "" || good == "":
		// Half-seeded (a crash between the two links): the one that exists
		// names a complete slot; give the other the same.
		slot := cur + good
		link := l.UpgradeSlots().Current
		if cur != "" {
			link = l.UpgradeSlots().LastGood
		}
		if _, err := pointLink(l, link, slot); err != nil {
			return res, fmt.Errorf("seed slots: %w", err)
		}
		res.Changed, res.Slot = true, slot
	default:
		res.Slot = cur
		if regular {
			same, err := sameFile(bin, slotPath(l, cur))
			if err != nil {
				return res, fmt.Errorf("seed slots: %w", err)
			}
			if !same {
				slot, err := adopt(ctx, l, bin, cur, good)
				if err != nil {
					return res, fmt.Errorf("seed slots: adopt %s: %w", l.AgentBinary(), err)
				}
				res.Changed, res.Adopted, res.Slot = true, true, slot
			}
		}
	}
	changed, err := fsutil.SymlinkAtomic(l.UpgradeSlots().Current, bin)
	if err != nil {
		return res, fmt.Errorf("seed slots: %w", err)
	}
	res.Changed = res.Changed || changed
	return res, nil
}

func adopt(ctx context.Context, l layout.Layout, bin, cur, good string) (string, error) {
	if r, err := LoadInFlight(l); err != nil {
		return "", err
	} else if r != nil {
		return "", fmt.Errorf("an upgrade to %s is in flight; wait for it to finish (aks-flex-node status)", r.ToVersion)
	}
	if cur != good {
		return "", fmt.Errorf("current (%s) and last-good (%s) differ with no upgrade in flight; the recovery unit repairs this, run: systemctl start %s", cur, good, layout.RecoveryUnit)
	}
	slot := other(l, cur)
	if err := copyIntoSlot(ctx, l, bin, slot); err != nil {
		return "", err
	}
	// last-good first: a crash in between leaves current behind last-good,
	// which recovery resolves by pointing current at last-good, the
	// adopted binary. The other order would be rolled back to the old one.
	for _, link := range []string{l.UpgradeSlots().LastGood, l.UpgradeSlots().Current} {
		if _, err := pointLink(l, link, slot); err != nil {
			return "", err
		}
	}
	return slot, nil
}

func sameFile(a, b string) (bool, error) {
	ha, err := fileSHA256(a)
	if err != nil {
		return false, err
	}
	hb, err := fileSHA256(b)
	if err != nil {
		return false, err
	}
	return ha == hb, nil
}

// copyIntoSlot writes src into a slot atomically and test-runs it. Callers
// only ever write a slot no link names.
func copyIntoSlot(ctx context.Context, l layout.Layout, src, slot string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	dst := slotPath(l, slot)
	if _, err := fsutil.WriteStreamAtomic(dst, f, 0o755); err != nil {
		return err
	}
	if l.Root() == "/" || l.Root() == "" {
		if _, err := TestRun(ctx, dst); err != nil {
			return err
		}
	}
	return nil
}

// Kept are the names in the lib dir that are the agent binary: `reset`
// keeps them, uninstall removes them.
func Kept(l layout.Layout) map[string]bool {
	return map[string]bool{
		filepath.Base(l.UpgradeSlots().Blue): true, filepath.Base(l.UpgradeSlots().Green): true,
		filepath.Base(l.UpgradeSlots().Current): true, filepath.Base(l.UpgradeSlots().LastGood): true,
		filepath.Base(l.RecoveryScript()): true,
	}
}

// CheckSeed says, changing nothing, whether Seed would fail on this host.
// start runs Seed in its install-agent-service task, after the node has
// joined; a failure there would leave a node in the cluster with no agent
// service, so start asks this before it touches the host.
func CheckSeed(ctx context.Context, l layout.Layout) error {
	bin := l.OnRoot(l.AgentBinary())
	cur, err := linkSlot(l, l.UpgradeSlots().Current)
	if err != nil {
		return fmt.Errorf("upgrade slots in %s (prefix %q): %w; run systemctl start %s to repair the links", l.LibDir(), l.Prefix(), err, layout.RecoveryUnit)
	}
	good, err := linkSlot(l, l.UpgradeSlots().LastGood)
	if err != nil {
		return fmt.Errorf("upgrade slots in %s (prefix %q): %w; run systemctl start %s to repair the links", l.LibDir(), l.Prefix(), err, layout.RecoveryUnit)
	}
	fi, statErr := os.Lstat(bin)
	regular := statErr == nil && fi.Mode().IsRegular()
	live := l.Root() == "/" || l.Root() == ""
	switch {
	case cur == "" && good == "":
		if !regular {
			what := "nothing is there"
			if statErr == nil {
				what = "it is not a regular file (" + fi.Mode().Type().String() + ")"
			}
			return fmt.Errorf("no agent binary at %s (prefix %q from %s; %s): the agent service runs a copy of it; install it there first (install.sh --binary PATH, or place the binary at that path)", l.AgentBinary(), l.Prefix(), l.ConfigFile(), what)
		}
		if live {
			if _, err := TestRun(ctx, bin); err != nil {
				return fmt.Errorf("agent binary %s: %w; install a working binary there", l.AgentBinary(), err)
			}
		}
	case cur != "" && good != "" && regular:
		same, err := sameFile(bin, slotPath(l, cur))
		if err != nil {
			return fmt.Errorf("compare %s with slot %s: %w", l.AgentBinary(), cur, err)
		}
		if same {
			return nil
		}
		// A new binary at agentBinary is adopted: that needs what adopt needs.
		if r, err := LoadInFlight(l); err != nil {
			return err
		} else if r != nil {
			return fmt.Errorf("a new binary at %s would replace the agent, but an upgrade to %s is in flight; wait for it to finish (aks-flex-node status --config %s)", l.AgentBinary(), r.ToVersion, l.ConfigFile())
		}
		if cur != good {
			return fmt.Errorf("a new binary at %s would replace the agent, but current (%s) and last-good (%s) differ; run systemctl start %s to repair the links", l.AgentBinary(), cur, good, layout.RecoveryUnit)
		}
		if live {
			if _, err := TestRun(ctx, bin); err != nil {
				return fmt.Errorf("agent binary %s: %w; install a working binary there", l.AgentBinary(), err)
			}
		}
	}
	return nil
}

package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/ignitiontest"
	"github.com/Azure/aks-flex-node/test/e2e/netsnap"
)

// firstBootUnit is the unit `ignition render` installs.
const firstBootUnit = "aks-flex-node-firstboot.service"

// renderIgnition renders the Ignition config of host s (its bootstrap-
// token config and the agent binary) with `ignition render`.
func (f *fleet) renderIgnition(t *testing.T, s spec, ip string) string {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, f.config(t, s, ip), 0o600); err != nil {
		t.Fatal(err)
	}
	ign := filepath.Join(dir, "config.ign")
	f.cli(t, "ignition", "render", "--config", cfg, "--binary", f.dist+"/aks-flex-node", "--output", ign)
	return ign
}

// bootIgnition provisions a fresh ACL-like root with the real Ignition
// (the platform's part: an empty resolv.conf and IMDS off, as nothing is
// there to ask) and boots it; the first-boot unit alone joins it, and the
// boot is over once it has (multi-user.target waits for it). Nothing is
// run inside the host before. Safe to call from another goroutine: it
// returns its error.
func (f *fleet) bootIgnition(t *testing.T, s spec, lh labHost, ign string) (*member, error) {
	before, err := outsideNet(lh.NS)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	prepare := func(root string) error {
		if err := ignitiontest.FreshRoot(root); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(root, "etc/resolv.conf"))
		if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), nil, 0o644); err != nil {
			return err
		}
		dropIn := filepath.Join(root, "etc/systemd/system", firstBootUnit+".d")
		if err := os.MkdirAll(dropIn, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dropIn, "10-test-imds.conf"), []byte("[Service]\nEnvironment=AKS_FLEX_NODE_IMDS_ENDPOINT=off\n"), 0o644); err != nil {
			return err
		}
		return ignitiontest.Run(t, dir, ign, root)
	}
	h, err := aclhost.Start(f.ctx, t, aclhost.Options{Variant: s.variant, Name: s.name, NetNS: lh.NS, BootTimeout: 5 * time.Minute,
		Prepare: prepare, ExtraArgs: []string{
			"--bind=" + t.TempDir() + ":/var/lib/machines",
			"--bind-ro=" + f.bundle + ":" + bundleDir,
		}})
	if err != nil {
		return nil, err
	}
	f.logOnFailure(t, s.name, h)
	return &member{spec: s, h: h, ip: lh.IP, netBefore: before}, nil
}

// checkFirstBootJoined: the first-boot unit ran start and succeeded.
func checkFirstBootJoined(t *testing.T, m *member) {
	out := m.h.RunOK(t, "systemctl", "show", "-p", "Result", "-p", "ExecMainStatus", "--value", firstBootUnit)
	if strings.Fields(out)[0] != "success" {
		t.Fatalf("%s: %s: %s", m.name, firstBootUnit, out)
	}
}

// outsideNet is the part of a namespace's network this machine can read
// before the host in it boots: its addresses and routes (the host's own
// tools read the netfilter state; see ignitionNetAfterReset).
func outsideNet(ns string) (netsnap.State, error) {
	s := netsnap.State{}
	for _, args := range [][]string{{"-j", "addr"}, {"-j", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", append([]string{"-n", nsName(ns)}, args...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("ip -n %s %s: %w", nsName(ns), strings.Join(args, " "), err)
		}
		s["ip "+strings.Join(args, " ")] = string(out)
	}
	return s, nil
}

// ignitionNetDiff compares the Ignition host after reset with what it was
// before it booted: addresses and routes as this machine reads them, and
// its netfilter state with that of the other ACL-like host before its
// join (the same image; the Ignition host joined during its first boot,
// so nothing ran in it before). One thing differs between the two: a
// first boot applies the presets, which enable nftables.service, so the
// Ignition host's boot loaded /etc/nftables.conf before the join; its
// "before" nft ruleset is that file loaded in an empty namespace.
func ignitionNetDiff(t *testing.T, m *member, lh labHost, acl netsnap.State) []string {
	after, err := outsideNet(lh.NS)
	if err != nil {
		t.Fatal(err)
	}
	inside := netsnap.Take(t, m.h)
	before := netsnap.State{}
	for k, v := range m.netBefore {
		before[k] = v
	}
	for k, v := range inside {
		if _, ip := after[k]; !ip {
			after[k] = v
			before[k] = acl[k]
		}
	}
	if active, _, _ := m.h.Run(context.Background(), "systemctl", "is-active", "nftables.service"); strings.TrimSpace(active) == "active" {
		loaded := m.h.RunOK(t, "unshare", "--net", "sh", "-ec", "nft -f /etc/nftables.conf; nft -j list ruleset")
		before[netsnap.NftKey] = netsnap.NftRuleset(t, loaded)
	}
	return netsnap.Diff(before, after)
}

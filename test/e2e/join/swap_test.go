package join

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/swap"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// swapLine is the fstab entry of the swap file the hosts carry before
// the join: it would turn swap on at every boot.
const swapLine = "/var/swapfile none swap sw 0 0"

// adminSwapUnit is a swap unit an admin wrote into /etc/systemd/system
// and enabled: `systemctl mask` cannot replace a unit file there, so
// start moves it aside to mask it, and reset puts it back. What it names
// does not exist: nothing can turn it on, even were it started.
const adminSwapUnit = "var-adminswap.swap"

// addSwapFile gives the host a swap file and its fstab line, and an
// enabled swap unit of an admin's, before the snapshot reset is compared
// against. Neither is turned on: swap is the kernel's, shared with every
// test on this machine, and systemd in a container does not activate
// swap; what is checked is that what would turn it on at boot is
// disabled by start (the line commented, the unit masked), stays so
// across a power cut, and is back as it was after reset (the tree diff).
func addSwapFile(t *testing.T, h *aclhost.Host) {
	t.Helper()
	h.ShellOK(t, `set -eu
dd if=/dev/zero of=/var/swapfile bs=1M count=8 status=none
chmod 600 /var/swapfile
mkswap /var/swapfile >/dev/null
printf '%s\n' '`+swapLine+`' >> /etc/fstab
printf '[Unit]\nDescription=admin swap (e2e)\n[Swap]\nWhat=/var/adminswap\n[Install]\nWantedBy=swap.target\n' > /etc/systemd/system/`+adminSwapUnit+`
systemctl enable `+adminSwapUnit+` 2>/dev/null`)
}

// checkSwapKeptOff: the fstab line is commented with start's marker,
// exactly once, and no swap is on.
func checkSwapKeptOff(t *testing.T, h *aclhost.Host, when string) {
	t.Helper()
	fstab := h.RunOK(t, "cat", "/etc/fstab")
	if strings.Count(fstab, swap.Marker+swapLine+"\n") != 1 || strings.Contains(strings.ReplaceAll(fstab, swap.Marker+swapLine, ""), swapLine) {
		t.Errorf("%s: /etc/fstab does not have the swap line commented once with %q:\n%s", when, swap.Marker, fstab)
	}
	if swaps := h.RunOK(t, "cat", "/proc/swaps"); strings.Contains(swaps, "/var/swapfile") {
		t.Errorf("%s: swap is on:\n%s", when, swaps)
	}
	if state, _, _ := h.Run(context.Background(), "systemctl", "is-enabled", adminSwapUnit); strings.TrimSpace(state) != "masked" {
		t.Errorf("%s: %s is %q, not masked", when, adminSwapUnit, strings.TrimSpace(state))
	}
}

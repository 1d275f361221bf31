package join

import (
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/swap"
	"github.com/Azure/aks-flex-node/test/aclhost"
)

// swapLine is the fstab entry of the swap file the hosts carry before
// the join: it would turn swap on at every boot.
const swapLine = "/var/swapfile none swap sw 0 0"

// addSwapFile gives the host a swap file and its fstab line, before the
// snapshot reset is compared against. It is not turned on: swap is the
// kernel's, shared with every test on this machine, and systemd in a
// container does not activate fstab swap; what is checked is that the
// line that would turn it on at boot is commented by start, stays so
// across a power cut, and is back as it was after reset (the tree diff).
func addSwapFile(t *testing.T, h *aclhost.Host) {
	t.Helper()
	h.ShellOK(t, `set -eu
dd if=/dev/zero of=/var/swapfile bs=1M count=8 status=none
chmod 600 /var/swapfile
mkswap /var/swapfile >/dev/null
printf '%s\n' '`+swapLine+`' >> /etc/fstab`)
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
}

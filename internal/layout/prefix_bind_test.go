package layout

import (
	"errors"
	"strings"
	"testing"
)

// Issue 26 item 12: the prefix's lib dir is bound into the machine (the
// credential plugin is the agent binary), so a prefix whose lib dir holds
// the state dir or the machines dir would show the machine the host's
// identity and state and the other machine's rootfs; one inside a
// machine's dir would let that machine write the host's agent. The prefix
// rule refuses them, saying what the bind would expose and what to use.
func TestPrefixWhoseBindExposesStateOrMachinesIsRefused(t *testing.T) {
	for _, tc := range []struct{ prefix, exposes string }{
		{"/var", stateDir},
		{"/var", machinesDir},
		{"/var/lib/machines/kube2/opt/aks", machinesDir},
		{"/var/lib/machines", machinesDir},
		{"/var/lib/aks-flex-node", stateDir},
	} {
		err := ValidatePrefix(tc.prefix)
		var pe *PrefixError
		if !errors.As(err, &pe) {
			t.Errorf("ValidatePrefix(%q) = %v, want a *PrefixError", tc.prefix, err)
			continue
		}
		for _, want := range []string{tc.exposes, SuggestedPrefix, "machine"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ValidatePrefix(%q): %q does not name %q", tc.prefix, err, want)
			}
		}
		if _, err := New("", tc.prefix, ""); err == nil {
			t.Errorf("layout.New accepted prefix %q", tc.prefix)
		}
	}
	for _, ok := range []string{"/opt/aks-flex-node", "/var/lib/x", "/var/opt/aks", "/var/lib/aks-flex-node-bin", "/usr/local"} {
		if err := ValidatePrefix(ok); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", ok, err)
		}
	}
}

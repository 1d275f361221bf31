package config

import (
	"strings"
	"testing"
)

// Issue 26 item 12: agent.hostPrefix /var would bind all of /var/lib
// (the state dir, the other machine's rootfs) into the machine; the
// config refuses it at its JSON path, saying what and what instead.
func TestHostPrefixVarIsRefusedAtItsJSONPath(t *testing.T) {
	m := base(t)
	set(m, "agent.hostPrefix", "/var")
	_, err := parse(t, m)
	if err == nil {
		t.Fatal("agent.hostPrefix /var was accepted")
	}
	for _, want := range []string{"agent.hostPrefix", "/var/lib/aks-flex-node", "/var/lib/machines", "/opt/aks-flex-node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

package preflight

import (
	"context"
	"strings"
	"testing"
)

func TestStartNamesMatchStartChecks(t *testing.T) {
	got := Names(StartChecks(newHost(t).env()))
	if strings.Join(got, ",") != strings.Join(StartNames, ",") {
		t.Fatalf("StartChecks names %v, StartNames %v", got, StartNames)
	}
	if strings.Join(got[len(DefaultNames):], ",") != NameAgentBinary+","+NameNodeVersion || strings.Join(got[:len(DefaultNames)], ",") != strings.Join(DefaultNames, ",") {
		t.Fatalf("StartChecks are not Checks then %s, %s: %v", NameAgentBinary, NameNodeVersion, got)
	}
}

// agent-binary is the slot-seed check start ran outside the report: on a
// host with nothing at the layout's agent binary it is an error that names
// the path, as the refusal did.
func TestAgentBinaryCheck(t *testing.T) {
	h := newHost(t)
	h.set("agent.hostPrefix", "/opt/aks-flex-node")
	env := h.env()
	var check Check
	for _, c := range StartChecks(env) {
		if c.Name() == NameAgentBinary {
			check = c
		}
	}
	if check.Target() != "/opt/aks-flex-node/bin/aks-flex-node" {
		t.Errorf("target %q", check.Target())
	}
	want(t, check.Run(context.Background()), SeverityError, "no agent binary at /opt/aks-flex-node/bin/aks-flex-node", "install-agent-service would fail")
	h.exec("opt/aks-flex-node/bin/aks-flex-node")
	// On a temp root the binary is not test-run: present and regular is
	// what can be asked there.
	want(t, check.Run(context.Background()), SeverityOK, "/opt/aks-flex-node/bin/aks-flex-node")
}

// `all` does not cover agent-binary: ignoring it cannot make start succeed,
// only fail after the join. Naming it does.
func TestIgnoreAllDoesNotCoverAgentBinary(t *testing.T) {
	failing := []Check{
		NewCheck(NameSwap, "/proc/swaps", func(context.Context) Result { return Error("r", "swap on") }),
		NewCheck(NameAgentBinary, "/usr/local/bin/aks-flex-node", func(context.Context) Result { return Error("r", "no agent binary") }),
	}
	rep := Run(context.Background(), failing, Options{IgnoreErrors: []string{IgnoreAll}})
	if !rep.Failed(false) || rep.Summary.Errors != 1 || rep.Checks[1].Ignored || !rep.Checks[0].Ignored {
		t.Fatalf("with all: %+v", rep)
	}
	var b strings.Builder
	_ = rep.WriteText(&b)
	if !strings.Contains(b.String(), "[ERROR agent-binary]") || !strings.Contains(b.String(), "--ignore-preflight-errors=agent-binary") {
		t.Errorf("text report:\n%s", b.String())
	}
	rep = Run(context.Background(), failing, Options{IgnoreErrors: []string{IgnoreAll, NameAgentBinary}})
	if rep.Failed(false) || rep.Summary.Ignored != 2 {
		t.Fatalf("with all and agent-binary named: %+v", rep)
	}
}

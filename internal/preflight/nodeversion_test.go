package preflight

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/state"
)

func startCheck(t *testing.T, env *Env, name string) Check {
	t.Helper()
	for _, c := range StartChecks(env) {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no start check %s", name)
	return nil
}

// node-version: no node yet passes; a node at the config's version
// passes without asking the API server; a version change start repaves
// is the new kubelet's skew against the API server (newer refused, a
// server that cannot be asked refused); a change start would not repave
// (no probe wired) is refused as an in-place install.
func TestNodeVersionCheck(t *testing.T) {
	h := newHost(t)
	h.set("components.kubernetes", "1.35.4")
	env := h.env()
	asked := 0
	server, serverErr := "v1.35.4", error(nil)
	probe := func(context.Context) (string, error) { asked++; return server, serverErr }
	check := startCheck(t, env, NameNodeVersion)
	want(t, check.Run(context.Background()), SeverityOK, "no node on this host yet")

	dir := env.Layout.OnRoot(env.Layout.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sides := state.Sides{Active: "kube1", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.35.4"}}}
	if err := state.OpenDir(dir).SaveSides(sides); err != nil {
		t.Fatal(err)
	}
	env.ServerVersion = probe
	want(t, check.Run(context.Background()), SeverityOK, "machine kube1 runs Kubernetes 1.35.4")
	if asked != 0 {
		t.Errorf("an unchanged version asked the API server %d times", asked)
	}

	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	sides = state.Sides{Active: "kube2", Machines: map[string]state.Side{
		"kube1": {KubernetesVersion: "1.35.4"}, "kube2": {KubernetesVersion: "1.34.2"},
	}, Last: &state.Repave{FromMachine: "kube1", ToMachine: "kube2", FromVersion: "1.35.4", ToVersion: "1.34.2", Finished: at, Result: state.RepaveSucceeded}}
	if err := state.OpenDir(dir).SaveSides(sides); err != nil {
		t.Fatal(err)
	}
	want(t, check.Run(context.Background()), SeverityOK, "start repaves machine kube2 from Kubernetes 1.34.2 to 1.35.4: kubelet 1.35.4 against API server v1.35.4")
	server = "v1.34.9"
	r := check.Run(context.Background())
	want(t, r, SeverityError, "start would repave machine kube2 from Kubernetes 1.34.2: kubelet 1.35.4 is newer than the API server v1.34.9")
	if !strings.Contains(r.Remedy, "set components.kubernetes in "+h.configFile()) {
		t.Errorf("remedy %q", r.Remedy)
	}
	serverErr = errors.New("connection refused")
	want(t, check.Run(context.Background()), SeverityError, "cannot read the API server's version: connection refused")

	env.ServerVersion = nil
	r = check.Run(context.Background())
	want(t, r, SeverityError, "machine kube2 runs Kubernetes 1.34.2 but the config says 1.35.4", "start would install 1.35.4 into the running machine in place")
	if !strings.Contains(r.Remedy, "node upgrade --kubernetes-version 1.35.4") {
		t.Errorf("remedy %q", r.Remedy)
	}

	if err := os.WriteFile(dir+"/"+state.SidesFile, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	want(t, check.Run(context.Background()), SeverityError, "cannot read the node's machines")
}

package preflight

import (
	"context"
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
// passes; a node a repave moved away from the config's version is
// refused, naming both versions, the repave and both ways out.
func TestNodeVersionCheck(t *testing.T) {
	h := newHost(t)
	h.set("components.kubernetes", "1.34.2")
	env := h.env()
	check := startCheck(t, env, NameNodeVersion)
	want(t, check.Run(context.Background()), SeverityOK, "no node on this host yet")

	dir := env.Layout.OnRoot(env.Layout.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sides := state.Sides{Active: "kube1", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.34.2"}}}
	if err := state.SaveSides(dir, sides); err != nil {
		t.Fatal(err)
	}
	want(t, check.Run(context.Background()), SeverityOK, "machine kube1 runs Kubernetes 1.34.2")

	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	sides = state.Sides{Active: "kube2", Machines: map[string]state.Side{
		"kube1": {KubernetesVersion: "1.34.2"}, "kube2": {KubernetesVersion: "1.35.4"},
	}, Last: &state.Repave{FromMachine: "kube1", ToMachine: "kube2", FromVersion: "1.34.2", ToVersion: "1.35.4", Finished: at, Result: state.RepaveSucceeded}}
	if err := state.SaveSides(dir, sides); err != nil {
		t.Fatal(err)
	}
	r := check.Run(context.Background())
	want(t, r, SeverityError,
		"machine kube2 runs Kubernetes 1.35.4 (node upgrade, 2026-12-04T09:00:00Z) but the config says 1.34.2",
		"start would install 1.34.2 into the running machine in place")
	for _, s := range []string{"set components.kubernetes to 1.35.4 in " + h.configFile(), "node upgrade --kubernetes-version 1.34.2"} {
		if !strings.Contains(r.Remedy, s) {
			t.Errorf("remedy %q lacks %q", r.Remedy, s)
		}
	}

	if err := os.WriteFile(dir+"/"+state.SidesFile, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	want(t, check.Run(context.Background()), SeverityError, "cannot read the node's machines")
}

package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// driftHost is a joined host on a temp root: the config file, the node
// files start wrote into kube1 and the checksums it recorded, and a
// runner that answers systemctl and machinectl as a running machine does
// (unit states from units) and records every call.
type driftHost struct {
	l      layout.Layout
	root   string // kube1's rootfs
	k      *MachineKeeper
	log    bytes.Buffer
	calls  []string
	units  map[string]string // unit or machine service -> ActiveState
	system string            // is-system-running
	jobs   string            // systemctl list-jobs --no-legend
	// failRestart is a unit whose restart fails.
	failRestart string
}

func newDriftHost(t testing.TB) *driftHost {
	t.Helper()
	root := t.TempDir()
	cfgPath := "/etc/aks-flex-node/config.json"
	l, err := layout.New(root, "/opt/aks-flex-node", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/acl-bootstrap-token.json")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, l.OnRoot(cfgPath), example)
	writeFile(t, l.OnRoot(l.JoinedMarker()), nil)
	c, err := config.Load(l.OnRoot(cfgPath))
	if err != nil {
		t.Fatal(err)
	}
	h := &driftHost{l: l, root: machine.Dir(l, layout.MachineBlue), system: "running",
		units: map[string]string{"systemd-nspawn@kube1.service": "active", "systemd-nspawn@kube2.service": "inactive",
			node.KubeletUnitName: "active", node.ContainerdUnitName: "active"}}
	if err := os.MkdirAll(h.root, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := node.HostOptions("v2")
	if _, _, err := node.Write(h.root, c, opts); err != nil {
		t.Fatal(err)
	}
	files, err := node.Render(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: c.Agent.NodeName, Machine: layout.MachineBlue, NodeFiles: node.Checksums(files)}); err != nil {
		t.Fatal(err)
	}
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		call := name + " " + strings.Join(args, " ")
		h.calls = append(h.calls, call)
		switch {
		case name == "machinectl" && args[0] == "show":
			return []byte("4242\n"), nil
		case name == "systemctl" && args[0] == "show":
			return []byte("ActiveState=" + h.units[args[1]] + "\n"), nil
		case name == "machinectl" && args[0] == "poweroff":
			h.units["systemd-nspawn@"+args[1]+".service"] = "inactive"
		case name == "nsenter" && slices.Contains(args, "is-system-running"):
			return []byte(h.system + "\n"), nil
		case name == "nsenter" && slices.Contains(args, "list-jobs"):
			return []byte(h.jobs), nil
		case name == "nsenter" && slices.Contains(args, "is-active"):
			return []byte(h.units[args[len(args)-1]] + "\n"), nil
		case name == "nsenter" && slices.Contains(args, "restart"):
			if args[len(args)-1] == h.failRestart {
				return []byte("Job failed"), errors.New("exit status 1")
			}
			h.units[args[len(args)-1]] = "active"
		}
		return nil, nil
	}
	h.k = &MachineKeeper{Layout: l, Control: &machine.Control{Run: run}, Log: slog.New(slog.NewTextHandler(&h.log, nil)),
		ConfigFile: l.OnRoot(cfgPath), CgroupMode: func() (string, error) { return "v2", nil }}
	return h
}

func writeFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (h *driftHost) keep(t *testing.T) {
	t.Helper()
	h.calls = nil
	if err := h.k.Keep(context.Background()); err != nil {
		t.Fatalf("keep: %v\n%s", err, h.log.String())
	}
}

// inMachine is whether the pass ran args in the machine.
func (h *driftHost) inMachine(args string) bool {
	return slices.Contains(h.calls, "nsenter -t 4242 -a -- "+args)
}

func (h *driftHost) repairs(t *testing.T) []string {
	t.Helper()
	list, err := state.Open(h.l).Repairs()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range list {
		kinds = append(kinds, r.Kind+": "+r.What)
	}
	return kinds
}

// A converged machine is left alone: nothing written, nothing restarted.
func TestKeepNodeConverged(t *testing.T) {
	h := newDriftHost(t)
	h.keep(t)
	for _, c := range h.calls {
		if strings.Contains(c, "restart") || strings.Contains(c, "daemon-reload") || strings.Contains(c, "machinectl start") {
			t.Errorf("a converged pass ran %q", c)
		}
	}
	if r := h.repairs(t); len(r) != 0 {
		t.Errorf("repairs on a converged machine: %q", r)
	}
}

// An edited kubelet config and a deleted kubelet unit are restored from
// the agent's rendering, systemd reloads and the kubelet restarts once;
// a file the agent did not write, edited too, is left as it is.
func TestKeepNodeRestoresEditedAndDeletedFiles(t *testing.T) {
	h := newDriftHost(t)
	cfg := filepath.Join(h.root, node.KubeletConfigFile)
	want, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(h.root, node.KubeletUnitFile)
	wantUnit, _ := os.ReadFile(unit)
	writeFile(t, cfg, append(append([]byte{}, want...), "maxPods: 3\n"...))
	if err := os.Remove(unit); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(h.root, "etc/hosts")
	writeFile(t, foreign, []byte("10.9.9.9 edited-by-admin\n"))
	h.keep(t)
	if got, _ := os.ReadFile(cfg); !bytes.Equal(got, want) {
		t.Errorf("kubelet config not restored:\n%s", got)
	}
	if got, _ := os.ReadFile(unit); !bytes.Equal(got, wantUnit) {
		t.Errorf("kubelet unit not restored:\n%s", got)
	}
	if got, _ := os.ReadFile(foreign); string(got) != "10.9.9.9 edited-by-admin\n" {
		t.Errorf("a file the agent does not own was changed: %q", got)
	}
	if !h.inMachine("systemctl daemon-reload") || !h.inMachine("systemctl restart kubelet.service") {
		t.Errorf("no reload and kubelet restart: %q", h.calls)
	}
	if h.inMachine("systemctl restart containerd.service") {
		t.Errorf("containerd restarted for the kubelet's files: %q", h.calls)
	}
	r := h.repairs(t)
	if len(r) != 2 || !strings.Contains(strings.Join(r, "\n"), "node-file-edited: "+node.KubeletConfigFile+" in machine kube1 was edited; aks-flex-node restored it and restarted kubelet.service") ||
		!strings.Contains(strings.Join(r, "\n"), "node-file-deleted: "+node.KubeletUnitFile) {
		t.Errorf("repairs recorded: %q", r)
	}
	if !strings.Contains(h.log.String(), "repaired: "+node.KubeletConfigFile) {
		t.Errorf("no log line for the repair:\n%s", h.log.String())
	}
	h.keep(t) // converged again
	if h.inMachine("systemctl restart kubelet.service") {
		t.Errorf("a second pass restarted the kubelet again: %q", h.calls)
	}
}

// A config changed since start renders differently: the file is not
// restored from a config nobody applied, and the pass fails saying so.
func TestKeepNodeRefusesARenderingStartDidNotRecord(t *testing.T) {
	h := newDriftHost(t)
	cfgPath := h.k.ConfigFile
	data, _ := os.ReadFile(cfgPath)
	writeFile(t, cfgPath, bytes.Replace(data, []byte(`"acl-node-01"`), []byte(`"acl-node-02"`), 1))
	cfg := filepath.Join(h.root, node.KubeletUnitFile)
	writeFile(t, cfg, []byte("[Service]\nExecStart=/bin/false\n"))
	err := h.k.Keep(context.Background())
	if err == nil || !strings.Contains(err.Error(), "run aks-flex-node start") {
		t.Fatalf("keep = %v, want the rendering refused", err)
	}
	if got, _ := os.ReadFile(cfg); string(got) != "[Service]\nExecStart=/bin/false\n" {
		t.Errorf("restored from a config start never applied: %q", got)
	}
}

// A stopped containerd is started; a running inactive side is stopped;
// a machine still booting is left to the next pass.
func TestKeepNodeUnitsAndInactiveSide(t *testing.T) {
	h := newDriftHost(t)
	h.units[node.ContainerdUnitName] = "inactive"
	h.units["systemd-nspawn@kube2.service"] = "active"
	h.keep(t)
	if !h.inMachine("systemctl restart containerd.service") {
		t.Errorf("stopped containerd not started: %q", h.calls)
	}
	if !slices.Contains(h.calls, "machinectl poweroff kube2") {
		t.Errorf("the inactive side kept running: %q", h.calls)
	}
	r := strings.Join(h.repairs(t), "\n")
	for _, want := range []string{"unit-stopped: containerd.service in machine kube1 was inactive", "inactive-machine-stopped: machine kube2"} {
		if !strings.Contains(r, want) {
			t.Errorf("repairs lack %q:\n%s", want, r)
		}
	}
	h.units[node.KubeletUnitName] = "failed"
	h.system = "starting"
	h.keep(t)
	if h.inMachine("systemctl restart kubelet.service") {
		t.Errorf("acted in a machine still booting: %q", h.calls)
	}
}

// An admin's stop of containerd stops the kubelet first: while that stop
// is queued, a stopped kubelet is left alone (starting it would start
// containerd and cancel the stop); once no job is queued, both start.
func TestKeepNodeLeavesUnitsWhileJobsAreQueued(t *testing.T) {
	h := newDriftHost(t)
	h.units[node.KubeletUnitName] = "inactive"
	h.units[node.ContainerdUnitName] = "deactivating"
	h.jobs = "1234 containerd.service stop running\n"
	h.keep(t)
	if h.inMachine("systemctl restart kubelet.service") || h.inMachine("systemctl restart containerd.service") {
		t.Errorf("started a unit while a job was queued: %q", h.calls)
	}
	h.jobs = ""
	h.units[node.ContainerdUnitName] = "inactive"
	h.keep(t)
	if !h.inMachine("systemctl restart kubelet.service") || !h.inMachine("systemctl restart containerd.service") {
		t.Errorf("units not started once the machine was at rest: %q", h.calls)
	}
}

// A restored file is reported only once the unit that reads it runs it:
// when the restart fails, no "restored it and restarted" repair is
// recorded (a reader of that Event would act on a unit not yet
// restarted), and the pass fails naming the unit.
func TestKeepNodeReportsARestoreOnlyAfterItsRestart(t *testing.T) {
	h := newDriftHost(t)
	cfg := filepath.Join(h.root, node.KubeletConfigFile)
	want, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, append(append([]byte{}, want...), "maxPods: 3\n"...))
	h.failRestart = node.KubeletUnitName
	h.calls = nil
	err = h.k.Keep(context.Background())
	if err == nil || !strings.Contains(err.Error(), "restart "+node.KubeletUnitName) {
		t.Errorf("keep: %v, want the failed restart named", err)
	}
	if r := h.repairs(t); len(r) != 0 {
		t.Errorf("repairs recorded before the restart that failed: %q", r)
	}
}

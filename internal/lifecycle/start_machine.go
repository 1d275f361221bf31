package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

type startMachine struct {
	machine Machine
	// rebootIf is what write-nspawn-files changed: the machine's settings
	// (its binds) apply at boot, so a running machine is rebooted.
	rebootIf *task.Output[bool]
	// restartIf are what install-node-components and write-node-config
	// changed: a machine that already runs must restart containerd and
	// the kubelet to pick up new components or config.
	restartIf []*task.Output[bool]
}

// StartMachine returns the task that boots the machine and waits until it
// runs; when it already runs, it reboots it if rebootIf is true, restarts
// containerd and the kubelet in it if any of restartIf is true, and
// otherwise leaves it alone.
func StartMachine(m Machine, rebootIf *task.Output[bool], restartIf ...*task.Output[bool]) task.Task {
	return &startMachine{machine: m, rebootIf: rebootIf, restartIf: restartIf}
}

func (t *startMachine) Name() string { return "start-machine" }

func (t *startMachine) Do(ctx context.Context) (task.Result, error) {
	m := t.machine
	st, err := m.Control.State(ctx, m.Name)
	if err != nil {
		return task.Result{}, err
	}
	reboot, err := t.rebootIf.Get()
	if err != nil {
		return task.Result{}, err
	}
	if st == "active" && !reboot {
		return t.restartNode(ctx)
	}
	if st == "active" {
		if err := m.Control.Stop(ctx, m.Name); err != nil {
			return task.Result{}, fmt.Errorf("stop machine %s to apply its new settings: %w", m.Name, err)
		}
	}
	// systemd must see the drop-in before the machine's unit starts.
	mgr := systemd.NewManager("/")
	if m.Control.Run != nil {
		mgr.Exec = m.Control.Run
	}
	if err := mgr.DaemonReload(ctx); err != nil {
		return task.Result{}, err
	}
	if err := m.Control.Start(ctx, m.Name); err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "machine "+m.Name+" to boot (its systemd to reach running)")
	state, err := m.Control.WaitRunning(ctx, m.Name, 2*time.Minute)
	if err != nil {
		return task.Result{Changed: true}, fmt.Errorf("machine %s did not boot: %w; %s", m.Name, err, m.logHint("systemd-nspawn@"+m.Name))
	}
	detail := "machine " + state
	if st == "active" {
		detail = "rebooted for its new settings: " + detail
	}
	return task.Result{Changed: true, Detail: detail}, nil
}

func (t *startMachine) restartNode(ctx context.Context) (task.Result, error) {
	restart := false
	for _, o := range t.restartIf {
		changed, err := o.Get()
		if err != nil {
			return task.Result{}, err
		}
		restart = restart || changed
	}
	if !restart {
		return task.Result{Detail: "already running"}, nil
	}
	m := t.machine
	if out, err := m.exec(ctx, "systemctl", "daemon-reload"); err != nil {
		return task.Result{}, fmt.Errorf("daemon-reload in %s: %v: %s", m.Name, err, bytes.TrimSpace(out))
	}
	if out, err := m.exec(ctx, "systemctl", "restart", "containerd.service", "kubelet.service"); err != nil {
		return task.Result{}, fmt.Errorf("restart node services in %s: %v: %s", m.Name, err, bytes.TrimSpace(out))
	}
	if err := t.restartKubeProxy(ctx); err != nil {
		return task.Result{Changed: true}, err
	}
	return task.Result{Changed: true, Detail: "node services restarted"}, nil
}

// restartKubeProxy restarts the agent's kube-proxy when write-node-config
// wrote its unit (networking.kubeProxy agent), and stops one that runs
// without it (the config went to the cluster's DaemonSet): two
// kube-proxies would fight over the node's rules.
func (t *startMachine) restartKubeProxy(ctx context.Context) error {
	m := t.machine
	if _, err := fsutil.ReadFileIn(m.Root(), node.KubeProxyUnitFile, 1<<20); err == nil {
		if out, err := m.exec(ctx, "systemctl", "restart", node.KubeProxyUnitName); err != nil {
			return fmt.Errorf("restart %s in %s: %v: %s", node.KubeProxyUnitName, m.Name, err, bytes.TrimSpace(out))
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if out, err := m.exec(ctx, "systemctl", "is-active", node.KubeProxyUnitName); err != nil || strings.TrimSpace(string(out)) != "active" {
		return nil
	}
	if out, err := m.exec(ctx, "systemctl", "stop", node.KubeProxyUnitName); err != nil {
		return fmt.Errorf("stop %s in %s: %v: %s", node.KubeProxyUnitName, m.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

package supportbundle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/diag"
	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
)

// reports: what `version`, `status`, `debug`, `preflight` and `host
// inspect` say, as JSON (debug as text too: it is what people read).
func (c *collector) reports(ctx context.Context) error {
	l := c.o.Layout
	if err := c.addJSON("reports/version.json", "aks-flex-node version --output json", buildinfo.Get(), nil); err != nil {
		return err
	}
	st, err := agentupgrade.GetStatus(ctx, l)
	if err := c.addJSON("reports/status.json", "aks-flex-node status --output json", st, err); err != nil {
		return err
	}
	cfg, _ := config.Load(l.OnRoot(l.ConfigFile())) // how the node signs in; nil is fine
	rep := diag.Run(ctx, &diag.Env{Layout: l, Config: cfg, Exec: c.o.Exec})
	if err := c.addJSON("reports/debug.json", "aks-flex-node debug --output json", rep, nil); err != nil {
		return err
	}
	var txt bytes.Buffer
	_ = rep.WriteText(&txt)
	if err := c.a.add("reports/debug.txt", "aks-flex-node debug", txt.Bytes()); err != nil {
		return err
	}
	for _, r := range []struct {
		member, source string
		f              func(context.Context) (any, error)
	}{
		{"reports/preflight.json", "aks-flex-node preflight --output json", c.o.Preflight},
		{"reports/host-inspect.json", "aks-flex-node host inspect --output json", c.o.HostInspect},
	} {
		if r.f == nil {
			c.missing(r.member, "not collected by this caller")
			continue
		}
		v, err := r.f(ctx)
		if err := c.addJSON(r.member, r.source, v, err); err != nil {
			return err
		}
	}
	return nil
}

// agentEndpoints: the running agent's own /healthz and /metrics.
func (c *collector) agentEndpoints(ctx context.Context) error {
	sock := c.o.Layout.OnRoot(c.o.Layout.AgentSocket())
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, ep := range []struct{ member, path string }{{"agent/healthz.json", "/healthz"}, {"agent/metrics.txt", "/metrics"}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+ep.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			c.missing(ep.member, fmt.Sprintf("the agent's %s on %s: %v", ep.path, c.o.Layout.AgentSocket(), err))
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxFile))
		resp.Body.Close()
		if err != nil {
			c.missing(ep.member, err.Error())
			continue
		}
		if err := c.a.add(ep.member, fmt.Sprintf("GET %s on %s (%d)", ep.path, c.o.Layout.AgentSocket(), resp.StatusCode), data); err != nil {
			return err
		}
	}
	return nil
}

// hostFiles: the config and every file the agent renders on the host,
// os-release, mounts, and the agent's log files.
func (c *collector) hostFiles(context.Context) error {
	l := c.o.Layout
	type hostFile struct {
		member, path string
		want         bool // listed as missing when absent
	}
	if err := c.addConfig("host/config.json"); err != nil {
		return err
	}
	files := []hostFile{
		{"host/os-release", "/etc/os-release", true},
		{"host/mounts", "/proc/self/mountinfo", true},
		{"host/meminfo", "/proc/meminfo", true},
		{"units/host/" + layout.AgentUnitName, l.Units().Agent, true},
		{"units/host/" + layout.RecoveryUnit, l.Units().Recovery, true},
		{"units/host/" + layout.RecoveryTimer, l.RecoveryTimerUnit(), true},
		{"units/host/" + layout.FirstBootUnitName, l.FirstBootUnit(), false},
		{"units/host/" + layout.RecoveryScript, l.RecoveryScript(), true},
		{"units/host/sysctl.conf", l.SysctlDropIn(), true},
		{"units/host/modules-load.conf", l.ModulesLoadFile(), true},
	}
	for _, m := range l.Machines() {
		files = append(files,
			hostFile{"units/host/" + m + ".nspawn", l.NspawnFile(m), m == c.machine()},
			hostFile{"units/host/" + layout.MachineUnit(m) + ".d/" + layout.MachineDropInName, l.MachineDropIn(m), m == c.machine()})
	}
	for _, f := range files {
		if err := c.addHostFile(f.member, f.path, f.want); err != nil {
			return err
		}
	}
	logs := c.dirFiles(l.LogDir())
	if len(logs) == 0 {
		c.missing("logs/agent", "no log files in agent.logDir "+l.LogDir())
	}
	for _, p := range logs {
		if err := c.addHostFile("logs/agent/"+base(p), p, false); err != nil {
			return err
		}
	}
	return nil
}

// stateFiles: the applied state, the install tracker, the upgrade
// records, the metrics store, the AKS Machine and rollout records
// (rollout.json: the release a rollout moved the node to, read by
// debug's rollout check), the machines' image records and the staged
// bundles' manifests. Not the staged bundles themselves.
func (c *collector) stateFiles(context.Context) error {
	l := c.o.Layout
	files := append(c.dirFiles(l.StateDir()), c.dirFiles(l.MachineStateDir())...)
	if len(files) == 0 {
		c.missing("state", "no state dir "+l.StateDir())
	}
	bundles, _ := os.ReadDir(l.OnRoot(l.BundlesDir()))
	for _, b := range bundles {
		if b.IsDir() {
			files = append(files, l.BundlesDir()+"/"+b.Name()+"/"+artifact.ManifestName)
		}
	}
	for _, p := range files {
		if strings.HasSuffix(p, ".lock") {
			continue
		}
		if err := c.addHostFile("state"+strings.TrimPrefix(p, l.StateDir()), p, false); err != nil {
			return err
		}
	}
	return nil
}

// machine is the node's machine (the applied state's, or the first).
func (c *collector) machine() string { return c.applied.ActiveMachine() }

// machineFiles: the node's units and configs in each machine there is,
// read confined to the machine's root. The kubelet's kubeconfigs are
// redacted like everything else; its private keys are not collected.
func (c *collector) machineFiles(context.Context) error {
	l := c.o.Layout
	files := []string{node.ContainerdUnitFile, node.KubeletUnitFile, node.CgroupRWUnitFile, node.ContainerdConfig, node.KubeletConfigFile,
		node.KubeletKubeconf, node.BootstrapKubeconf, node.ClusterCAFile, "/etc/os-release"}
	for _, m := range l.Machines() {
		root := l.OnRoot(l.MachineDir(m))
		if _, err := os.Stat(root); err != nil {
			if m == c.machine() {
				c.missing("machines/"+m, fmt.Sprintf("machine %s is not provisioned: %v", m, err))
			}
			continue
		}
		names := append([]string(nil), files...)
		if r, err := fsroot.OpenDir(root, node.CNIConfDir); err == nil {
			if d, err := r.Open("."); err == nil {
				entries, _ := d.Readdirnames(-1)
				d.Close()
				for _, e := range entries {
					names = append(names, node.CNIConfDir+"/"+e)
				}
			}
			r.Close()
		}
		for _, p := range names {
			data, err := fsutil.ReadFileIn(root, p, maxFile)
			member := "machines/" + m + p
			if err != nil {
				c.missing(member, fmt.Sprintf("%s in machine %s: %v", p, m, err))
				continue
			}
			if err := c.a.add(member, p+" in machine "+m, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostNetwork: addresses, routes, policy rules, the nftables and
// iptables rulesets, and what systemd and machined say.
func (c *collector) hostNetwork(ctx context.Context) error {
	for _, cmd := range [][]string{
		{"host/addresses", "ip", "-d", "address"},
		{"host/routes", "ip", "route", "show", "table", "all"},
		{"host/routes6", "ip", "-6", "route", "show", "table", "all"},
		{"host/rules", "ip", "rule"},
		{"host/rules6", "ip", "-6", "rule"},
		{"host/nftables", "nft", "list", "ruleset"},
		{"host/iptables", "iptables-save"},
		{"host/ip6tables", "ip6tables-save"},
		{"host/uname", "uname", "-a"},
		{"host/df", "df", "-h"},
		{"host/failed-units", "systemctl", "--failed", "--no-pager"},
		{"host/machines", "machinectl", "list", "--no-pager"},
	} {
		if err := c.addCommand(ctx, cmd[0], maxFile, cmd[1], cmd[2:]...); err != nil {
			return err
		}
	}
	return nil
}

// journals: the agent's units on the host, and each machine's containerd,
// kubelet and whole boot. A running machine's journal is read by its own
// journalctl (inside its namespaces); a stopped one's through its journal
// directory, resolved inside the machine's root.
func (c *collector) journals(ctx context.Context) error {
	l := c.o.Layout
	since := fmt.Sprintf("--since=-%ds", int(c.o.Since.Seconds()))
	common := []string{"--no-pager", "-o", "short-iso", since}
	for _, u := range []string{layout.AgentUnitName, layout.FirstBootUnitName, layout.RecoveryUnit, machine.ServiceName(layout.MachineBlue), machine.ServiceName(layout.MachineGreen)} {
		args := append(append([]string{}, common...), "-u", u)
		if err := c.addJournal(ctx, "logs/journal/"+u+".log", "journalctl "+strings.Join(args, " "), "journalctl", args...); err != nil {
			return err
		}
	}
	ctl := &machine.Control{Run: c.o.Exec}
	for _, m := range l.Machines() {
		root := l.OnRoot(l.MachineDir(m))
		if _, err := os.Stat(root); err != nil {
			continue
		}
		for _, j := range []struct {
			name string
			sel  []string
		}{{node.ContainerdUnitName, []string{"-u", node.ContainerdUnitName}}, {node.KubeletUnitName, []string{"-u", node.KubeletUnitName}}, {"boot", []string{"-b"}}} {
			member, sel := "logs/journal/"+m+"/"+j.name+".log", j.sel
			if st, err := ctl.State(ctx, m); err == nil && st == "active" {
				if err := c.machineJournal(ctx, ctl, m, member, sel, append(append([]string{"journalctl"}, common...), sel...)); err != nil {
					return err
				}
				continue
			}
			dir, err := fsroot.Resolve(root, "/var/log/journal")
			if err != nil {
				c.missing(member, err.Error())
				continue
			}
			args := append(append([]string{"-D", dir}, common...), sel...)
			if err := c.addJournal(ctx, member, "journalctl "+strings.Join(args, " "), "journalctl", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// machineJournal adds a running machine's journal, read by its own
// journalctl inside its namespaces, streamed into a bounded buffer. A
// caller's Exec without Stream (whole outputs) goes through the machine's
// Exec as before.
func (c *collector) machineJournal(ctx context.Context, ctl *machine.Control, m, member string, sel, cmd []string) error {
	source := "journalctl " + strings.Join(sel, " ") + " in machine " + m
	if c.o.Stream == nil && c.o.Exec != nil {
		out, err := ctl.Exec(ctx, m, cmd...)
		if err != nil && len(out) == 0 {
			c.missing(member, err.Error())
			return nil
		}
		return c.a.add(member, source, tail(out, c.o.JournalMax))
	}
	pid, err := ctl.Leader(ctx, m)
	if err != nil {
		c.missing(member, fmt.Sprintf("in machine %s: %v", m, err))
		return nil
	}
	return c.addJournal(ctx, member, source, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, cmd...)...)
}

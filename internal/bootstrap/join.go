package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
	"github.com/Azure/aks-flex-node/internal/upgrade"
)

func (p *Pipeline) inMachine(ctx context.Context, args ...string) ([]byte, error) {
	return p.control.Exec(ctx, p.machineName(), args...)
}

// logHint says where to look when a step inside the machine hangs.
func (p *Pipeline) logHint(unit string) string {
	return fmt.Sprintf("its log: journalctl -D %s/var/log/journal -u %s (or, inside: machinectl shell %s)", p.Layout.MachineDir(p.machineName()), unit, p.machineName())
}

func (p *Pipeline) startMachineTask() task.Task {
	return task.Func{N: "start-machine", F: func(ctx context.Context) (task.Result, error) {
		name := p.machineName()
		st, err := p.control.State(ctx, name)
		if err != nil {
			return task.Result{}, err
		}
		if st == "active" {
			if !p.restartNode {
				return task.Result{Detail: "already running"}, nil
			}
			if out, err := p.inMachine(ctx, "systemctl", "daemon-reload"); err != nil {
				return task.Result{}, fmt.Errorf("daemon-reload in %s: %v: %s", name, err, bytes.TrimSpace(out))
			}
			if out, err := p.inMachine(ctx, "systemctl", "restart", "containerd.service", "kubelet.service"); err != nil {
				return task.Result{}, fmt.Errorf("restart node services in %s: %v: %s", name, err, bytes.TrimSpace(out))
			}
			return task.Result{Changed: true, Detail: "node services restarted"}, nil
		}
		// systemd must see the drop-in before the machine's unit starts.
		if err := systemd.NewManager("/").DaemonReload(ctx); err != nil {
			return task.Result{}, err
		}
		if err := p.control.Start(ctx, name); err != nil {
			return task.Result{}, err
		}
		state, err := p.control.WaitRunning(ctx, name, 2*time.Minute)
		if err != nil {
			return task.Result{Changed: true}, fmt.Errorf("machine %s did not boot: %w; %s", name, err, p.logHint("systemd-nspawn@"+name))
		}
		return task.Result{Changed: true, Detail: "machine " + state}, nil
	}}
}

func (p *Pipeline) importImagesTask() task.Task {
	return task.Func{N: "import-images", F: func(ctx context.Context) (task.Result, error) {
		archives, err := node.ImageArchives(p.machineRoot())
		if err != nil || len(archives) == 0 {
			return task.Result{}, err
		}
		// containerd starts with the machine; give it a bounded time.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			if _, err := p.inMachine(wctx, node.CtrBinary, "version"); err == nil {
				break
			}
			select {
			case <-wctx.Done():
				return task.Result{}, fmt.Errorf("containerd in %s not answering after 1m; %s", p.machineName(), p.logHint("containerd"))
			case <-time.After(300 * time.Millisecond):
			}
		}
		// ImportImages skips archives already present; tell the two apart
		// by asking before and after.
		before, _ := p.inMachine(ctx, node.CtrBinary, "-n", "k8s.io", "images", "ls", "-q")
		if err := node.ImportImages(ctx, p.machineRoot(), func(ctx context.Context, args ...string) ([]byte, error) { return p.inMachine(ctx, args...) }, archives); err != nil {
			return task.Result{}, err
		}
		after, _ := p.inMachine(ctx, node.CtrBinary, "-n", "k8s.io", "images", "ls", "-q")
		return task.Result{Changed: !bytes.Equal(before, after), Detail: fmt.Sprintf("%d archive(s)", len(archives))}, nil
	}}
}

// kubeletClientCert is where the kubelet links its issued client certificate.
const kubeletClientCert = "/var/lib/kubelet/pki/kubelet-client-current.pem"

func (p *Pipeline) kubeletKubeconfig() string {
	return filepath.Join(p.machineRoot(), node.KubeletKubeconf)
}

func (p *Pipeline) waitTLSBootstrapTask() task.Task {
	return task.Func{N: "wait-tls-bootstrap", F: func(ctx context.Context) (task.Result, error) {
		wctx, cancel := context.WithTimeout(ctx, p.JoinTimeout)
		defer cancel()
		// The kubelet writes its kubeconfig early; the bootstrap is done
		// when the issued client certificate is in place.
		cert := filepath.Join(p.machineRoot(), kubeletClientCert)
		if err := waitFile(wctx, cert, 250*time.Millisecond); err != nil {
			return task.Result{}, fmt.Errorf("the kubelet did not finish its TLS bootstrap within %v (no %s yet; is the CSR approved?): %w; %s", p.JoinTimeout, kubeletClientCert, err, p.logHint("kubelet"))
		}
		return task.Result{}, nil
	}}
}

func (p *Pipeline) waitNodeReadyTask() task.Task {
	return task.Func{N: "wait-node-ready", F: func(ctx context.Context) (task.Result, error) {
		kc, err := hostKubeconfig(p.kubeletKubeconfig(), p.machineRoot())
		if err != nil {
			return task.Result{}, err
		}
		wctx, cancel := context.WithTimeout(ctx, p.JoinTimeout)
		defer cancel()
		if err := waitNodeReady(wctx, kc, p.Config.Agent.NodeName, func(s string) { p.progressf("  %s", s) }); err != nil {
			return task.Result{}, fmt.Errorf("node %s not Ready within %v: %w; %s", p.Config.Agent.NodeName, p.JoinTimeout, err, p.logHint("kubelet"))
		}
		return task.Result{}, nil
	}}
}

// hostKubeconfig loads the kubelet's kubeconfig for use from the host. Its
// certificate paths are inside the machine, and the current-certificate
// link is absolute there, so each is resolved under the machine root and
// inlined; nothing is written to disk.
func hostKubeconfig(path, machineRoot string) (*rest.Config, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	read := func(p string) ([]byte, error) {
		for range 8 {
			full := filepath.Join(machineRoot, p)
			target, err := os.Readlink(full)
			if err != nil {
				return os.ReadFile(full)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			p = target
		}
		return nil, fmt.Errorf("%s: too many links", p)
	}
	for _, ai := range cfg.AuthInfos {
		if ai.ClientCertificate != "" {
			if ai.ClientCertificateData, err = read(ai.ClientCertificate); err != nil {
				return nil, err
			}
			ai.ClientCertificate = ""
		}
		if ai.ClientKey != "" {
			if ai.ClientKeyData, err = read(ai.ClientKey); err != nil {
				return nil, err
			}
			ai.ClientKey = ""
		}
	}
	for _, c := range cfg.Clusters {
		if c.CertificateAuthority != "" {
			if c.CertificateAuthorityData, err = read(c.CertificateAuthority); err != nil {
				return nil, err
			}
			c.CertificateAuthority = ""
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}

func (p *Pipeline) saveStateTask() task.Task {
	return task.Func{N: "save-state", F: func(ctx context.Context) (task.Result, error) {
		digest, _ := machine.ImageDigest(p.Layout, p.machineName())
		dir := p.Layout.OnRoot(p.Layout.StateDir())
		if err := p.track(p.Layout.StateDir()+"/"+state.AppliedFile, p.Layout.StateDir()+"/"+state.AppliedFile+".sha256"); err != nil {
			return task.Result{}, err
		}
		changed, err := state.SaveApplied(dir, state.Applied{
			ConfigFile:        p.ConfigFile,
			ConfigSHA256:      state.ConfigDigest(p.ConfigData),
			Prefix:            p.Layout.Prefix(),
			NodeName:          p.Config.Agent.NodeName,
			Machine:           p.machineName(),
			ImageDigest:       digest,
			KubernetesVersion: p.Config.Components.Kubernetes,
			AgentVersion:      buildinfo.Version,
			AppliedAt:         time.Now().UTC(),
		})
		return task.Result{Changed: changed}, err
	}}
}

func (p *Pipeline) agentServiceTask() task.Task {
	return task.Func{N: "install-agent-service", F: func(ctx context.Context) (task.Result, error) {
		if err := p.track(append([]string{p.Layout.Units().Agent}, upgrade.UnitPaths(p.Layout)...)...); err != nil {
			return task.Result{}, err
		}
		// The same code as install-service: on a host whose binary was
		// placed at agentBinary (Ignition), this seeds the upgrade slots.
		changed, err := upgrade.InstallService(ctx, p.Layout, systemd.NewManager(p.Layout.Root()), p.Log)
		return task.Result{Changed: changed}, err
	}}
}

func (p *Pipeline) joinedMarkerTask() task.Task {
	return task.Func{N: "write-joined-marker", F: func(ctx context.Context) (task.Result, error) {
		path := p.Layout.StateDir() + "/" + JoinedMarker
		if err := p.track(path); err != nil {
			return task.Result{}, err
		}
		changed, err := fsutil.WriteFile(p.Layout.OnRoot(path), []byte(p.Config.Agent.NodeName+"\n"), 0o644)
		return task.Result{Changed: changed}, err
	}}
}

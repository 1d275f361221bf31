package fleetrollout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

const aclPrefix = "/opt/aks-flex-node"

// spec is one host of the fleet.
type spec struct {
	name    string
	variant aclhost.Variant
	prefix  string
}

// agent is where the host's agent binary is installed.
func (s spec) agent() string {
	if s.prefix == "" {
		return "/usr/local/bin/aks-flex-node"
	}
	return s.prefix + "/bin/aks-flex-node"
}

// specs are the four hosts: three ACL-like, one Debian.
var specs = []spec{
	{name: "fr-acl-1", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fr-acl-2", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fr-acl-3", variant: aclhost.ACL, prefix: aclPrefix},
	{name: "fr-debian", variant: aclhost.Debian},
}

// host is a booted host of the fleet.
type host struct {
	spec
	h      *aclhost.Host
	ns, ip string
}

// boot starts a host on its lab namespace with an empty resolv.conf
// (nothing to resolve, nowhere to go), the agent and install.sh in
// /root/dist and its config at release A; journals are logged when the
// test fails.
func (e *env) boot(t *testing.T, s spec, lh netlab.BridgeHost) *host {
	h := aclhost.MustStart(t, aclhost.Options{Variant: s.variant, Name: s.name, NetNS: lh.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
	}})
	m := &host{spec: s, h: h, ns: lh.NS, ip: lh.IP}
	e.logOnFailure(t, m)
	h.ShellOK(t, "rm -f /etc/resolv.conf && : > /etc/resolv.conf")
	must(t, h.CopyIn(e.dist, "/root/dist/aks-flex-node", 0o755))
	must(t, h.CopyIn(repoRoot()+"/scripts/install.sh", "/root/dist/install.sh", 0o755))
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", e.config(m), 0o600))
	return m
}

// config is the host's config at release A: the joined version's
// bundle and worker image a from the site registry, a bootstrap token.
func (e *env) config(m *host) []byte {
	// The default reconcile interval (1m): the rollout is driven by
	// watches, and the benchmark counts requests as a node makes them.
	agent := map[string]any{"nodeName": m.name}
	if m.prefix != "" {
		agent["hostPrefix"] = m.prefix
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"azure":      map[string]any{"bootstrapToken": map[string]any{"token": e.token}},
		"agent":      agent,
		"components": map[string]any{"kubernetes": joined, "containerd": e.rel.manifest.Components.Containerd, "runc": e.rel.manifest.Components.Runc, "sandboxImage": fixtures.PauseImageRef},
		"networking": map[string]any{"cniVersion": e.rel.manifest.Components.CNI, "clusterPodCIDR": controlplane.PodCIDR},
		"bootstrap": map[string]any{"ociImage": e.rel.workers["a"],
			"offlineArtifacts": map[string]any{"source": e.rel.bundles["k8s-"+joined]}},
		"node": map[string]any{"kubelet": map[string]any{"clusterFQDN": strings.TrimPrefix(e.cp.Server, "https://"), "caCertData": base64.StdEncoding.EncodeToString(e.cp.CAPEM), "nodeIP": m.ip}},
	}, "", "  ")
	return cfg
}

// logOnFailure logs the host's agent, `status`, and the kubelet of each
// machine when the test fails (registered after the host, so it runs
// before the host stops).
func (e *env) logOnFailure(t *testing.T, m *host) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, _, _ := m.h.Run(ctx, "journalctl", "--no-pager", "-n", "200", "-u", "aks-flex-node-agent")
		t.Logf("%s: agent:\n%s", m.name, a)
		s, _, _ := m.h.Run(ctx, m.agent(), "status")
		t.Logf("%s: status:\n%s", m.name, s)
		for _, machine := range []string{"kube1", "kube2"} {
			j, _, _ := m.h.Run(ctx, "journalctl", "-D", "/var/lib/machines/"+machine+"/var/log/journal", "--no-pager", "-n", "40", "-u", "kubelet")
			t.Logf("%s: kubelet in %s:\n%s", m.name, machine, j)
		}
	})
}

// joinAll installs the agent on every host, runs start on all of them
// at once and waits for every Node to be Ready.
func (e *env) joinAll(t *testing.T) {
	sum, _, err := fsutil.FileSHA256(e.dist)
	must(t, err)
	for _, m := range e.hosts {
		m.h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node", "--sha256", sum)
	}
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(e.hosts))
	for i, m := range e.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, stderr, err := m.h.Run(e.ctx, m.agent(), "start", "--join-timeout", "3m"); err != nil {
				errs[i] = fmt.Errorf("%s: start: %w\n%s\n%s", m.name, err, out, stderr)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range e.hosts {
		kubetest.WaitReady(e.ctx, t, e.cp.Client, m.name, 2*time.Minute)
	}
	t.Logf("BENCH rollout-e2e join hosts=%d all-ready=%v", len(e.hosts), time.Since(begin).Round(time.Millisecond))
}

// sides is `status --output json`'s node part: which machine runs and
// what each side has.
type sides struct {
	Active   string `json:"active"`
	Machines map[string]struct {
		KubernetesVersion string `json:"kubernetesVersion"`
		ImageDigest       string `json:"imageDigest"`
		Failed            string `json:"failed"`
	} `json:"machines"`
}

func (m *host) status(ctx context.Context) (sides, error) {
	out, stderr, err := m.h.Run(ctx, m.agent(), "status", "--output", "json")
	if err != nil {
		return sides{}, fmt.Errorf("%s: status: %w\n%s", m.name, err, stderr)
	}
	var s struct {
		Node sides `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return sides{}, fmt.Errorf("%s: status json: %w\n%s", m.name, err, out)
	}
	return s.Node, nil
}

package join

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// A bundle in upstream AKS Flex Node's layout (fixtures.UpstreamBundle:
// the fixture bundle's files re-laid out to upstream's file list, with
// kube-proxy and upstream's manifest.json) is bound into every host; the
// Debian host's fresh join, after reset and uninstall, takes its node
// components from it, and its worker image from bootstrap.ociImage, since
// upstream's layout carries none.
const (
	upstreamBundleDir   = "/var/lib/aks-flex-node-test/upstream-bundle"
	upstreamTamperedDir = "/var/lib/aks-flex-node-test/upstream-tampered"
	workerImageDir      = "/var/lib/aks-flex-node-test/worker-image"
)

// prepareUpstream makes (or finds in the cache) the upstream-layout bundle
// and a copy of it with one byte of the kubelet changed.
func (e *env) prepareUpstream(t *testing.T) {
	begin := time.Now()
	dir, err := fixtures.UpstreamBundle(e.ctx, t.Logf, e.bundle)
	if err != nil {
		t.Fatal(err)
	}
	e.upstream = dir
	e.upstreamTampered = tamperedCopy(t, dir, e.manifest)
	t.Logf("BENCH upstream-bundle fixture+tampered-copy=%v", time.Since(begin).Round(time.Millisecond))
}

// upstreamBinds bind the upstream bundle, its tampered copy and the worker
// image's OCI layout into a host, read-only.
func (e *env) upstreamBinds() []string {
	return []string{
		"--bind-ro=" + e.upstream + ":" + upstreamBundleDir,
		"--bind-ro=" + e.upstreamTampered + ":" + upstreamTamperedDir,
		"--bind-ro=" + e.layoutDir + ":" + workerImageDir,
	}
}

// upstreamSource points a config at the upstream-layout bundle.
func upstreamSource(p *cfgParts) {
	p.bootstrap["offlineArtifacts"] = map[string]any{"source": upstreamBundleDir}
	p.bootstrap["ociImage"] = "oci-layout://" + workerImageDir + ":" + fixtures.WorkerTag
}

// checkUpstreamVerify: `artifacts verify` on the host accepts the
// upstream-layout bundle and refuses its tampered copy, naming the
// kubelet and its .sha256. The native bundle is verified the same way
// for the figures: both layouts, one host, one binary.
func (e *env) checkUpstreamVerify(t *testing.T, h *aclhost.Host) {
	agent, v := "/root/dist/aks-flex-node", e.manifest.Components.Kubernetes
	timed := func(src string) (string, time.Duration, error) {
		begin := time.Now()
		out, _, err := h.Run(e.ctx, agent, "artifacts", "verify", "--source", src, "--kubernetes-version", v)
		return out, time.Since(begin), err
	}
	out, up, err := timed(upstreamBundleDir)
	if err != nil || !strings.Contains(out, upstreamBundleDir+": verified, ") || !strings.Contains(out, "upstream's layout") {
		t.Errorf("artifacts verify of the upstream-layout bundle: %v\n%s", err, out)
	}
	out, bad, err := timed(upstreamTamperedDir)
	kubelet := upstreamTamperedDir + "/" + artifactPath(e.manifest, "kubelet")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); exitCode(err) != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], kubelet+": sha256 ") || !strings.Contains(lines[0], "!= kubelet.sha256 ") {
		t.Errorf("artifacts verify of the tampered upstream-layout bundle: exit %d, want 1 and one line naming %s:\n%s", exitCode(err), kubelet, out)
	}
	out, native, err := timed("/var/lib/aks-flex-node-test/bundle")
	if err != nil {
		t.Errorf("artifacts verify of the native bundle: %v\n%s", err, out)
	}
	t.Logf("BENCH artifacts-verify layout=upstream %v, tampered refused %v; layout=native (with the worker image) %v", up.Round(time.Millisecond), bad.Round(time.Millisecond), native.Round(time.Millisecond))
}

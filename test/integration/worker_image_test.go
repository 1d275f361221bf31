package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// contractImage is a worker image of stub programs for arch that meets
// the worker image contract, minus the programs named in without: enough
// for preflight's worker-image check (it boots nothing).
func contractImage(t *testing.T, arch string, without ...string) v1.Image {
	t.Helper()
	skip := map[string]bool{}
	for _, w := range without {
		skip[w] = true
	}
	var members []tarMember
	for _, p := range []string{"usr/lib/systemd/systemd", "usr/bin/mount", "usr/bin/umount", "usr/bin/nsenter",
		"usr/sbin/iptables", "usr/sbin/ip", "usr/sbin/conntrack", "usr/sbin/modprobe"} {
		if !skip[p[strings.LastIndex(p, "/")+1:]] {
			members = append(members, exe(p))
		}
	}
	members = append(members,
		tarMember{tar.Header{Name: "etc/ssl/certs/ca-certificates.crt", Typeflag: tar.TypeReg, Mode: 0o644}, "certs\n"},
		tarMember{tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644}, "ID=debian\n"})
	b := tarStream(t, members...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, l)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestStartRefusesBadWorkerImage: start's worker-image preflight check
// refuses, before anything on the ACL-like host changes, an image on an
// unreachable registry, an image for another arch, and an image without
// iptables (naming the contract item); a good image passes the check.
func TestStartRefusesBadWorkerImage(t *testing.T) {
	h := prepare(t, aclhost.ACL, testConfig(t, aclPrefix))
	h.RunOK(t, "/root/dist/install.sh", "--binary", "/root/dist/aks-flex-node")
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	push := httptest.NewServer(reg)
	defer push.Close()
	for tag, img := range map[string]v1.Image{
		"good": contractImage(t, runtime.GOARCH), "arm": contractImage(t, otherArch()), "noipt": contractImage(t, runtime.GOARCH, "iptables"),
	} {
		ref, err := name.ParseReference(strings.TrimPrefix(push.URL, "http://")+"/aks/worker:"+tag, name.Insecure)
		must(t, err)
		must(t, remote.Write(ref, img))
	}
	l, err := h.ListenTCP("127.0.0.1:0")
	must(t, err)
	serveCounted(t, l, nil, reg)
	at := l.Addr().String() + "/aks/worker:"

	before := snapshot(t, h)
	for _, tc := range []struct{ name, image, want string }{
		{"unreachable registry", "127.0.0.1:1/aks/worker:good", "does not resolve"},
		{"wrong arch", at + "arm", "is for linux/" + otherArch() + "; this host runs linux/" + runtime.GOARCH},
		{"contract miss", at + "noipt", "does not meet the worker image contract: iptables: none of iptables in"},
	} {
		must(t, h.WriteFile("/etc/aks-flex-node/config.json", withBootstrap(t, testConfig(t, aclPrefix), map[string]any{"ociImage": tc.image}), 0o600))
		stdout, stderr, err := h.Run(context.Background(), aclPrefix+"/bin/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json",
			"--ignore-preflight-errors=api-server-reachable,bootstrap-token")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stdout, "[ERROR worker-image]") || !strings.Contains(stdout, tc.want) {
			t.Errorf("%s: want a worker-image refusal saying %q, got %v:\n%s\n%s", tc.name, tc.want, err, stdout, stderr)
		}
	}
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", testConfig(t, aclPrefix), 0o600))
	if d := aclhost.Diff(before, snapshot(t, h)); len(d) > 0 {
		t.Errorf("a refused start changed the host:\n%s", strings.Join(d, "\n"))
	}
	must(t, h.WriteFile("/etc/aks-flex-node/config.json", withBootstrap(t, testConfig(t, aclPrefix), map[string]any{"ociImage": at + "good"}), 0o600))
	r, _, out := runPreflight(t, h)
	if sev, msg, _ := r.check(t, "worker-image"); sev != "warning" || !strings.Contains(msg, "meets the worker image contract (12 items)") {
		t.Errorf("good image: worker-image %s: %s\n%s", sev, msg, out)
	}
}

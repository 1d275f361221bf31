package integration

import (
	"archive/tar"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// The host paths the hostile images aim at.
const (
	hostFile  = "/root/host-file"
	hostDir   = "/root/host-dir"
	hostBin   = "/root/host-bin"
	hostUnits = "/root/host-units"
)

var hostTime = time.Unix(1600000000, 0)

// plantTargets makes the host paths the images aim at, with known modes
// and times.
func plantTargets(t *testing.T, h *aclhost.Host) {
	t.Helper()
	must(t, h.WriteFile(hostFile, []byte("host"), 0o644))
	for _, d := range []string{hostDir, hostBin, hostUnits} {
		must(t, os.MkdirAll(h.Path(d), 0o750))
		must(t, os.Chmod(h.Path(d), 0o750))
	}
	for _, p := range []string{hostFile, hostDir, hostBin, hostUnits} {
		must(t, os.Chtimes(h.Path(p), hostTime, hostTime))
	}
}

// checkTargets fails when anything about the host paths changed: mode,
// mtime, an xattr, or a directory that is no longer empty.
func checkTargets(t *testing.T, h *aclhost.Host) {
	t.Helper()
	for _, p := range []string{hostFile, hostDir, hostBin, hostUnits} {
		fi, err := os.Lstat(h.Path(p))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if p != hostFile {
			want = 0o750 | os.ModeDir
			if entries, _ := os.ReadDir(h.Path(p)); len(entries) > 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("host dir %s written: %v", p, names)
			}
		}
		if fi.Mode() != want || !fi.ModTime().Equal(hostTime) {
			t.Errorf("host path %s changed: %v mtime %v, want %v mtime %v", p, fi.Mode(), fi.ModTime(), want, hostTime)
		}
		if _, err := syscall.Getxattr(h.Path(p), "user.evil", make([]byte, 8)); err == nil {
			t.Errorf("host path %s got the image's xattr", p)
		}
	}
}

func dirHdr(name string) tarMember {
	return tarMember{tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o6777, ModTime: time.Unix(1700000000, 0),
		Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.evil": "1"}}, ""}
}

func linkHdr(name, target string) tarMember {
	return tarMember{tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, ""}
}

// TestStartHostileWorkerImage runs `start` on the ACL-like host, under
// real systemd, with worker images built to reach the host (issue 13,
// defects 1 and 3):
//
//   - a layer whose directories ("etc/", "opt/", mode 06777, an xattr) are
//     then replaced by links to a host file and a host dir, in an image
//     whose config names another diff ID: start fails at provision-machine
//     on the digest, and the host paths are untouched (on main the host
//     file became -rwsrwsrwx before the digest check failed);
//   - a valid image with the same replaced directory and with
//     etc/kubernetes, etc/systemd and usr/local/bin linked to host dirs:
//     it provisions, the components and the node config (the bootstrap
//     token) land inside the rootfs, and start fails later, at
//     start-machine (the image is no OS), with the host paths untouched.
func TestStartHostileWorkerImage(t *testing.T) {
	bundle := fakeBundle(t)
	badDigest := imageLayout(t, tarStream(t,
		dirHdr("etc/"), linkHdr("etc", hostFile),
		dirHdr("opt/"), linkHdr("opt", hostDir),
		exe("usr/bin/true"),
	), true)
	valid := imageLayout(t, tarStream(t,
		dirHdr("srv/"), linkHdr("srv", hostFile),
		tarMember{tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		linkHdr("etc/kubernetes", hostDir),
		linkHdr("etc/systemd", hostUnits),
		tarMember{tar.Header{Name: "usr/local/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		linkHdr("usr/local/bin", hostBin),
	), false)

	h := installed(t, startConfig(t, "oci-layout:///root/images/bad:hostile", "/root/bundle"))
	must(t, h.CopyIn(bundle, "/root/bundle", 0o755))
	must(t, h.CopyIn(badDigest, "/root/images/bad", 0o755))
	must(t, h.CopyIn(valid, "/root/images/valid", 0o755))
	plantTargets(t, h)
	// worker-image is ignored: these images are no OS and fail the image
	// contract; what is under test is provisioning them.
	start := []string{aclPrefix + "/bin/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json",
		"--ignore-preflight-errors=api-server-reachable,bootstrap-token,worker-image"}

	_, stderr, code := runBounded(t, h, 3*time.Minute, start...)
	if code != 1 || !strings.Contains(stderr, "start: provision-machine:") || !strings.Contains(stderr, "config says") {
		t.Errorf("start with an image whose layer is not its config's: exit %d, want 1 at provision-machine on the diff ID:\n%s", code, stderr)
	}
	checkTargets(t, h)
	if entries, _ := os.ReadDir(h.Path("/var/lib/machines")); len(entries) != 0 {
		t.Errorf("left in /var/lib/machines: %v", entries)
	}

	must(t, h.WriteFile("/etc/aks-flex-node/config.json", startConfig(t, "oci-layout:///root/images/valid:hostile", "/root/bundle"), 0o600))
	_, stderr, code = runBounded(t, h, 4*time.Minute, start...)
	if code != 1 || !strings.Contains(stderr, "start: start-machine:") {
		t.Errorf("start with the valid hostile image: exit %d, want 1 at start-machine, after write-node-config:\n%s", code, stderr)
	}
	t.Logf("start with the valid hostile image failed as expected:\n%s", lastLines(stderr, 5))
	checkTargets(t, h)
	rootfs := "/var/lib/machines/kube1"
	for p, mode := range map[string]os.FileMode{
		rootfs + hostDir + "/bootstrap-kubelet.conf":   0o600,
		rootfs + hostUnits + "/system/kubelet.service": 0o644,
		rootfs + hostBin + "/kubelet":                  0o755,
	} {
		fi, err := os.Stat(h.Path(p))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want it inside the rootfs with mode %v", p, fi, err, mode)
		}
	}
	if l, err := os.Readlink(h.Path(rootfs + "/srv")); err != nil || l != hostFile {
		t.Errorf("srv in the rootfs: %q %v", l, err)
	}
	if t.Failed() {
		h.DumpDiagnostics(t)
	}
}

// lastLines is the last n lines of s, for logs.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

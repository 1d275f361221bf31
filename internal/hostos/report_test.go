package hostos

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func copyTestdata(t *testing.T, root, name, rel string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/os-release", name))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, rel, string(b))
}

// aclRoot builds a tree shaped like an ACL host: vendor os-release behind
// the usual relative /etc link, systemd and nspawn present, no package
// manager, and a proc dir whose mount table has a read-only /usr and a
// sysext overlay on /opt.
func aclRoot(t *testing.T) *Prober {
	root := t.TempDir()
	copyTestdata(t, root, "acl-azurelinux-variant", "usr/lib/os-release")
	symlink(t, root, "../usr/lib/os-release", "etc/os-release")
	writeExec(t, root, "usr/lib/systemd/systemd")
	writeExec(t, root, "usr/bin/systemd-nspawn")
	writeExec(t, root, "usr/bin/machinectl")
	writeFile(t, root, "proc/self/mountinfo", aclMountInfo)
	writeFile(t, root, "proc/1/comm", "systemd\n")
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/sysext"), 0o700); err != nil {
		t.Fatal(err)
	}
	return &Prober{Root: root, ProcDir: filepath.Join(root, "proc")}
}

func TestInspectACL(t *testing.T) {
	p := aclRoot(t)
	r, err := p.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Family != FamilyACL || !r.UsrReadOnly || r.PackageManager != "" || r.SELinux != "" ||
		!r.Systemd.Present || r.Systemd.Version != 0 || !r.Nspawn.Present || r.CgroupMode != CgroupV2 {
		t.Errorf("report %+v", r)
	}
	if r.OSReleasePath != filepath.Join(p.Root, "etc/os-release") {
		t.Errorf("osReleasePath %q", r.OSReleasePath)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{
		"/usr is read-only: served by mount /usr (ext4 /dev/mapper/usr",
		"/opt is covered by a systemd-sysext overlay at /opt",
		"systemd.version not probed: --root is not /",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if got, want := r.Summary(), "Azure Container Linux 3.0 (read-only /usr, no package manager)"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestInspectUbuntu(t *testing.T) {
	root := t.TempDir()
	copyTestdata(t, root, "ubuntu-24.04", "usr/lib/os-release")
	symlink(t, root, "../usr/lib/os-release", "etc/os-release")
	symlink(t, root, "usr/bin", "bin")
	symlink(t, root, "usr/lib", "lib")
	writeExec(t, root, "usr/lib/systemd/systemd")
	writeExec(t, root, "usr/bin/apt-get")
	writeFile(t, root, "var/lib/dpkg/status", "Package: base-files\n")
	writeFile(t, root, "proc/self/mountinfo",
		"26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,discard,errors=remount-ro\n"+
			"30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
	r, err := (&Prober{Root: root, ProcDir: filepath.Join(root, "proc")}).Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Family != FamilyUbuntu || r.UsrReadOnly || r.PackageManager != "apt-get" || r.Nspawn.Present {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "systemd-nspawn not found") {
		t.Errorf("notes %q", r.Notes)
	}
	if got, want := r.Summary(), "Ubuntu 24.04 (writable /usr, package manager apt-get)"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestInspectRHELWithoutProc(t *testing.T) {
	root := t.TempDir()
	copyTestdata(t, root, "rocky-9", "etc/os-release")
	writeExec(t, root, "usr/bin/dnf") // no rpm database: not usable
	writeFile(t, root, "etc/selinux/config", "SELINUX=enforcing\nSELINUXTYPE=targeted\n")
	r, err := Inspect(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Family != FamilyRHEL || r.PackageManager != "" || r.SELinux != "enforcing" || r.Systemd.Present {
		t.Errorf("report %+v", r)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{
		"usrReadOnly not probed: --root is not /",
		"cgroupMode not probed: --root is not /",
		"package manager not usable: dnf at /usr/bin/dnf but no rpm database",
		"systemd not found",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if got, want := r.Summary(), "Rocky Linux 9.4 (Blue Onyx) (/usr not probed, no package manager)"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestInspectNoOSRelease(t *testing.T) {
	root := t.TempDir()
	r, err := Inspect(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Family != FamilyUnknown || r.OS.IDLike == nil {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), filepath.Join(root, "usr/lib/os-release")) {
		t.Errorf("notes do not name the files looked at: %q", r.Notes)
	}
	if got := r.Summary(); got != "unknown OS (unsupported, /usr not probed, no package manager)" {
		t.Errorf("Summary = %q", got)
	}

	if _, err := Inspect(context.Background(), filepath.Join(root, "missing")); err == nil {
		t.Error("missing root: want error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Inspect(ctx, root); err == nil {
		t.Error("cancelled context: want error")
	}
}

func jsonKeys(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		jsonKeys(strings.TrimPrefix(prefix+"."+k, "."), sub, out)
	}
}

func TestReportJSONShape(t *testing.T) {
	for name, root := range map[string]string{"empty root": t.TempDir(), "acl": aclRoot(t).Root} {
		t.Run(name, func(t *testing.T) {
			r, err := Inspect(context.Background(), root)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			var keys []string
			jsonKeys("", v, &keys)
			sort.Strings(keys)
			want := []string{
				"cgroupMode", "family", "notes", "nspawn.present",
				"os.id", "os.idLike", "os.prettyName", "os.variantId", "os.versionId",
				"osReleasePath", "packageManager", "selinux",
				"systemd.present", "systemd.version", "usrReadOnly",
			}
			if !reflect.DeepEqual(keys, want) {
				t.Errorf("keys\n got %q\nwant %q", keys, want)
			}
			if bytes.Contains(b, []byte("null")) {
				t.Errorf("JSON has null: %s", b)
			}
			var back Report
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Summary() != r.Summary() {
				t.Errorf("Summary changed through JSON: %q vs %q", back.Summary(), r.Summary())
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	r, err := aclRoot(t).Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"OS:                 Microsoft Azure Linux 3.0\n",
		"family:             acl (Azure Container Linux, image-based)\n",
		"/usr read-only:     yes\n",
		"package manager:    none\n",
		"SELinux:            absent\n",
		"systemd:            present\n",
		"systemd-nspawn:     present\n",
		"cgroup mode:        v2\n",
		"notes:\n  - ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

package hostos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeExec(t *testing.T, root, rel string) {
	t.Helper()
	writeFile(t, root, rel, "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(root, rel), 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, target, rel string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func TestLookTool(t *testing.T) {
	root := t.TempDir()
	writeExec(t, root, "usr/bin/nsenter")
	writeExec(t, root, "usr/sbin/xtables-nft-multi")
	symlink(t, root, "usr/bin", "bin") // merged /usr
	symlink(t, root, "/usr/sbin/xtables-nft-multi", "usr/sbin/iptables")
	writeFile(t, root, "usr/bin/notexec", "data")
	if err := os.MkdirAll(filepath.Join(root, "usr/bin/adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec(t, root, "usr/local/bin/helm")
	symlink(t, root, "/nonexistent", "usr/bin/dangling")

	tests := []struct {
		name string
		path string
		ok   bool
	}{
		{"nsenter", "/usr/bin/nsenter", true},
		{"iptables", "/usr/sbin/iptables", true}, // absolute link resolved inside root
		{"helm", "/usr/local/bin/helm", true},
		{"notexec", "", false},
		{"adir", "", false},
		{"dangling", "", false},
		{"missing", "", false},
		{"../bin/nsenter", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		p, ok := LookTool(root, tc.name)
		if p != tc.path || ok != tc.ok {
			t.Errorf("LookTool(%q) = %q, %v; want %q, %v", tc.name, p, ok, tc.path, tc.ok)
		}
	}
}

func TestDetectPackageManager(t *testing.T) {
	t.Run("apt-get with dpkg", func(t *testing.T) {
		root := t.TempDir()
		writeExec(t, root, "usr/bin/apt-get")
		writeFile(t, root, "var/lib/dpkg/status", "")
		pm := DetectPackageManager(root)
		if pm.Name != "apt-get" || pm.Path != "/usr/bin/apt-get" || !pm.Usable {
			t.Errorf("%+v", pm)
		}
	})
	t.Run("tdnf preferred over dnf", func(t *testing.T) {
		root := t.TempDir()
		writeExec(t, root, "usr/bin/tdnf")
		symlink(t, root, "tdnf", "usr/bin/dnf")
		if err := os.MkdirAll(filepath.Join(root, "var/lib/rpm"), 0o755); err != nil {
			t.Fatal(err)
		}
		if pm := DetectPackageManager(root); pm.Name != "tdnf" || !pm.Usable {
			t.Errorf("%+v", pm)
		}
	})
	t.Run("dnf with sysimage rpmdb", func(t *testing.T) {
		root := t.TempDir()
		writeExec(t, root, "usr/bin/dnf")
		if err := os.MkdirAll(filepath.Join(root, "usr/lib/sysimage/rpm"), 0o755); err != nil {
			t.Fatal(err)
		}
		if pm := DetectPackageManager(root); pm.Name != "dnf" || !pm.Usable || !strings.Contains(pm.Detail, "/usr/lib/sysimage/rpm") {
			t.Errorf("%+v", pm)
		}
	})
	t.Run("binary without database is not usable", func(t *testing.T) {
		root := t.TempDir()
		writeExec(t, root, "usr/bin/apt-get")
		pm := DetectPackageManager(root)
		if pm.Name != "apt-get" || pm.Usable || !strings.Contains(pm.Detail, "/var/lib/dpkg/status") {
			t.Errorf("%+v", pm)
		}
	})
	t.Run("none", func(t *testing.T) {
		pm := DetectPackageManager(t.TempDir())
		if pm.Name != "" || pm.Usable || !strings.Contains(pm.Detail, "/usr/bin") {
			t.Errorf("%+v", pm)
		}
	})
}

func TestDetectSELinux(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  SELinux
	}{
		{"enforce file wins", map[string]string{
			"sys/fs/selinux/enforce": "0\n", "etc/selinux/config": "SELINUX=enforcing\n",
		}, SELinux{"permissive", "/sys/fs/selinux/enforce"}},
		{"enforcing", map[string]string{"sys/fs/selinux/enforce": "1"}, SELinux{"enforcing", "/sys/fs/selinux/enforce"}},
		{"config", map[string]string{
			"etc/selinux/config": "# SELINUX=disabled\nSELINUX=Enforcing\nSELINUXTYPE=targeted\n",
		}, SELinux{"enforcing", "/etc/selinux/config"}},
		{"config quoted", map[string]string{"etc/selinux/config": `SELINUX="disabled"`}, SELinux{"disabled", "/etc/selinux/config"}},
		{"config garbage", map[string]string{"etc/selinux/config": "SELINUX=maybe\n"}, SELinux{}},
		{"absent", nil, SELinux{}},
	}
	for _, tc := range tests {
		root := t.TempDir()
		for p, c := range tc.files {
			writeFile(t, root, p, c)
		}
		if got := DetectSELinux(root); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseSystemctlVersion(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT +SELINUX\n", 252, true},
		{"systemd 255 (255.4-1ubuntu8.4)\n+PAM", 255, true},
		{"systemd 219\n+PAM", 219, true},
		{"systemd 256~rc3 (256~rc3-1)", 256, true},
		{"systemd 256.8", 256, true},
		{"", 0, false},
		{"systemd", 0, false},
		{"systemd abc", 0, false},
		{"elogind 252", 0, false},
		{"\nsystemd 252", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseSystemctlVersion([]byte(tc.in))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseSystemctlVersion(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestSystemdProbe(t *testing.T) {
	root := t.TempDir()
	writeExec(t, root, "usr/lib/systemd/systemd")
	writeFile(t, root, "proc/1/comm", "systemd\n")
	p := &Prober{Root: root, ProcDir: filepath.Join(root, "proc")}
	p.Run = func(context.Context, string, ...string) ([]byte, error) {
		t.Fatal("must not run host commands for a root that is not /")
		return nil, nil
	}
	s := p.Systemd(context.Background())
	if !s.Present || s.Path != "/usr/lib/systemd/systemd" || !s.PID1Probed || !s.PID1 || s.Version != 0 {
		t.Errorf("%+v", s)
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "systemd.version not probed: --root is not /") {
		t.Errorf("notes %q", s.Notes)
	}

	// Without a proc dir, PID 1 is reported as not probed rather than false.
	s = (&Prober{Root: root}).Systemd(context.Background())
	if s.PID1Probed || !strings.Contains(strings.Join(s.Notes, "\n"), "PID 1 not probed") {
		t.Errorf("%+v", s)
	}
}

func TestSystemdVersionLive(t *testing.T) {
	if _, ok := LookTool("/", "systemctl"); !ok {
		t.Skip("no systemctl on this host")
	}
	var ran string
	p := &Prober{ProcDir: t.TempDir(), Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = name + " " + strings.Join(args, " ")
		return []byte("systemd 257 (257.1)\n"), nil
	}}
	if s := p.Systemd(context.Background()); s.Version != 257 || !strings.HasSuffix(ran, "systemctl --version") {
		t.Errorf("version %d, ran %q", s.Version, ran)
	}
	p.Run = func(context.Context, string, ...string) ([]byte, error) { return nil, errors.New("boom") }
	if s := p.Systemd(context.Background()); s.Version != 0 || !strings.Contains(strings.Join(s.Notes, "\n"), "boom") {
		t.Errorf("%+v", s)
	}
}

func TestDetectNspawn(t *testing.T) {
	root := t.TempDir()
	writeExec(t, root, "usr/bin/systemd-nspawn")
	n := DetectNspawn(root)
	if !n.Present || n.Path != "/usr/bin/systemd-nspawn" || n.Machinectl {
		t.Errorf("%+v", n)
	}
}

func TestNearestExistingAncestor(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "etc/afile", "")
	symlink(t, root, "/var/opt", "vopt") // absolute, resolved inside root
	if err := os.MkdirAll(filepath.Join(root, "var/opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Prober{Root: root}
	tests := map[string]string{
		"/opt/aks-flex-node/bin": "/opt",
		"/opt":                   "/opt",
		"/nope/deeper":           "/",
		"/etc/afile/sub":         "/etc/afile",
		"/vopt/x":                "/vopt",
		"/opt/../etc/x":          "/etc",
	}
	for in, want := range tests {
		got, err := p.NearestExistingAncestor(in)
		if err != nil || got != want {
			t.Errorf("NearestExistingAncestor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := p.NearestExistingAncestor("relative/path"); err == nil {
		t.Error("relative path must be rejected")
	}
	if _, err := os.Stat(filepath.Join(root, "opt/aks-flex-node")); !os.IsNotExist(err) {
		t.Error("probe created a directory")
	}
	if got, err := (&Prober{}).NearestExistingAncestor("/proc/self/definitely/not/there"); err != nil || got != "/proc/self" {
		t.Errorf("live: %q, %v", got, err)
	}
}

func TestCheckDir(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"opt", "var/lib", "usr/bin", "proc/self"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, root, "etc/afile", "")
	// The fixture says /usr is read-only although the temp dir is not:
	// the mount table is what preflight trusts for image-based hosts.
	writeFile(t, root, "proc/self/mountinfo", aclMountInfo)
	p := &Prober{Root: root, ProcDir: filepath.Join(root, "proc")}

	c, err := p.CheckDir("/usr/bin")
	if err != nil || c.Writable || c.Mount == nil || c.Mount.MountPoint != "/usr" || !strings.Contains(c.Reason, "read-only mount /usr") {
		t.Errorf("/usr/bin: %+v, %v", c, err)
	}
	c, err = p.CheckDir("/opt")
	if err != nil || c.Writable || !strings.Contains(c.Reason, "overlay sysext") {
		t.Errorf("/opt: %+v, %v", c, err)
	}
	c, err = p.CheckDir("/var/lib")
	if err != nil || !c.Writable || c.Reason != "" {
		t.Errorf("/var/lib: %+v, %v", c, err)
	}
	c, err = p.CheckDir("/etc/afile")
	if err != nil || c.Writable || !strings.Contains(c.Reason, "not a directory") {
		t.Errorf("/etc/afile: %+v, %v", c, err)
	}
	if _, err := p.CheckDir("/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/missing: want not-exist error, got %v", err)
	}

	// Without a mount table for this root, access(2) alone decides.
	c, err = (&Prober{Root: root}).CheckDir("/usr/bin")
	if err != nil || !c.Writable || c.Mount != nil {
		t.Errorf("no mount table: %+v, %v", c, err)
	}

	if c, err := (&Prober{}).CheckDir(t.TempDir()); err != nil || !c.Writable {
		t.Errorf("live temp dir: %+v, %v", c, err)
	}
	if _, err := (&Prober{}).CheckDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("live missing dir: want error")
	}
}

func TestMountsNotLive(t *testing.T) {
	_, err := (&Prober{Root: t.TempDir()}).Mounts()
	if !errors.Is(err, ErrLiveHostOnly) {
		t.Errorf("got %v", err)
	}
	root := t.TempDir()
	writeFile(t, root, "proc/self/mountinfo", "garbage line\n")
	_, err = (&Prober{Root: root, ProcDir: filepath.Join(root, "proc")}).Mounts()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "proc/self/mountinfo")) {
		t.Errorf("want error naming the file, got %v", err)
	}
}

func TestProberSysext(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/self/mountinfo", aclMountInfo)
	p := &Prober{Root: root, ProcDir: filepath.Join(root, "proc")}
	s, err := p.Sysext("/opt/aks-flex-node")
	if err != nil || !s.Covered {
		t.Errorf("%+v, %v", s, err)
	}
	if _, err := (&Prober{Root: root}).Sysext("/opt"); !errors.Is(err, ErrLiveHostOnly) {
		t.Errorf("got %v", err)
	}
}

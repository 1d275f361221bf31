package hostos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// aclMountInfo is shaped like an ACL/Flatcar host: /usr a read-only ext4
// on dm-verity, a sysext overlay on /opt, cgroup v2, and a path with a
// space to exercise the kernel's octal escapes.
const aclMountInfo = `22 1 259:3 / / rw,relatime shared:1 - ext4 /dev/sda9 rw,seclabel
23 22 253:0 / /usr ro,relatime shared:2 - ext4 /dev/mapper/usr ro,seclabel
24 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
25 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw,seclabel
26 25 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,seclabel,nsdelegate,memory_recursiveprot
27 22 0:23 / /run rw,nosuid,nodev shared:12 - tmpfs tmpfs rw,seclabel,size=1630152k,nr_inodes=819200,mode=755
28 22 0:40 / /tmp rw,nosuid,nodev,noexec shared:13 master:4 - tmpfs tmpfs rw,seclabel
29 23 259:6 / /usr/share/oem ro,nodev,relatime shared:14 - btrfs /dev/sda6 ro,seclabel,space_cache=v2
30 22 0:50 / /opt ro,nodev,relatime shared:20 - overlay sysext ro,seclabel,lowerdir=/run/systemd/sysext/meta/opt:/run/systemd/sysext/extensions/docker-flatcar/opt:/opt
31 22 259:9 /var/lib/my\040data /srv/my\040data rw,relatime shared:1 - ext4 /dev/sda9 rw,seclabel
32 22 0:51 / /usr/local rw,relatime shared:21 - overlay overlay rw,lowerdir=/usr/local,upperdir=/var/usrlocal/upper,workdir=/var/usrlocal/work
`

func TestParseMountInfo(t *testing.T) {
	ms, err := ParseMountInfo(strings.NewReader(aclMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 11 {
		t.Fatalf("got %d mounts", len(ms))
	}
	tmp := ms[6]
	want := Mount{
		ID: 28, ParentID: 22, MajorMinor: "0:40", Root: "/", MountPoint: "/tmp",
		Options:  []string{"rw", "nosuid", "nodev", "noexec"},
		Optional: []string{"shared:13", "master:4"},
		FSType:   "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "seclabel"},
	}
	if !reflect.DeepEqual(tmp, want) {
		t.Errorf("got  %+v\nwant %+v", tmp, want)
	}
	if !tmp.NoExec() || tmp.ReadOnly() {
		t.Errorf("/tmp: noexec=%v ro=%v", tmp.NoExec(), tmp.ReadOnly())
	}
	if usr := ms[1]; !usr.ReadOnly() || usr.NoExec() {
		t.Errorf("/usr: ro=%v noexec=%v", usr.ReadOnly(), usr.NoExec())
	}
	sp := ms[9]
	if sp.MountPoint != "/srv/my data" || sp.Root != "/var/lib/my data" {
		t.Errorf("octal escapes not decoded: %q %q", sp.MountPoint, sp.Root)
	}
	if v, ok := ms[8].SuperOption("lowerdir"); !ok || !strings.HasPrefix(v, "/run/systemd/sysext/meta/opt:") {
		t.Errorf("lowerdir = %q, %v", v, ok)
	}
}

func TestParseMountInfoEdgeCases(t *testing.T) {
	// No optional fields at all; a super-options-only ro; escaped tab,
	// backslash and comma; an escape the kernel never writes stays as is.
	in := "40 1 0:5 / /a\\011b\\134c ro - tmpfs x\\054y rw,opt=a\\054b\n" +
		"\n" +
		"41 1 0:6 / /ro-super rw - ext4 /dev/x ro\n" +
		"42 1 0:7 / /odd\\9x rw - ext4 /dev/y rw\n"
	ms, err := ParseMountInfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[0].MountPoint; got != "/a\tb\\c" {
		t.Errorf("mount point %q", got)
	}
	if ms[0].Source != "x,y" || !reflect.DeepEqual(ms[0].SuperOptions, []string{"rw", "opt=a,b"}) {
		t.Errorf("source %q super %q", ms[0].Source, ms[0].SuperOptions)
	}
	if len(ms[0].Optional) != 0 || ms[0].Optional == nil {
		t.Errorf("optional = %#v", ms[0].Optional)
	}
	if !ms[1].ReadOnly() {
		t.Error("ro in super options must make the mount read-only")
	}
	if ms[2].MountPoint != `/odd\9x` {
		t.Errorf("non-octal escape changed: %q", ms[2].MountPoint)
	}

	for _, bad := range []string{
		"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw",
		"36 35 98:0 /mnt1 /mnt2 rw - ext3",
		"x 35 98:0 / /m rw - ext3 /dev/root rw",
		"36 y 98:0 / /m rw - ext3 /dev/root rw",
	} {
		if _, err := ParseMountInfo(strings.NewReader("22 1 259:3 / / rw - ext4 /dev/sda9 rw\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: want error naming line 2, got %v", bad, err)
		}
	}
}

func TestMountFor(t *testing.T) {
	ms, err := ParseMountInfo(strings.NewReader(aclMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"/":                         "/",
		"/usr":                      "/usr",
		"/usr/":                     "/usr",
		"/usr/bin/bash":             "/usr",
		"/usr/local":                "/usr/local",
		"/usr/local/bin/x":          "/usr/local",
		"/usrx":                     "/",
		"/usr/share/oem/x":          "/usr/share/oem",
		"/opt/aks-flex-node/bin":    "/opt",
		"/optional":                 "/",
		"/var/lib":                  "/",
		"/srv/my data/x":            "/srv/my data",
		"/srv/my":                   "/",
		"/usr/../opt/x":             "/opt",
		"usr/bin":                   "/usr",
		"/sys/fs/cgroup/kubepods/x": "/sys/fs/cgroup",
	}
	for p, want := range tests {
		if got := MountFor(ms, p).MountPoint; got != want {
			t.Errorf("MountFor(%q) = %q, want %q", p, got, want)
		}
	}
	if m := MountFor(nil, "/usr"); m.MountPoint != "" {
		t.Errorf("empty table gave %+v", m)
	}

	// Stacked mounts: the later line is on top and wins.
	stacked, err := ParseMountInfo(strings.NewReader(
		"1 0 0:1 / / rw - ext4 a rw\n2 1 0:2 / /usr rw - ext4 b rw\n3 2 0:3 / /usr ro - overlay sysext ro,lowerdir=/x\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := MountFor(stacked, "/usr/bin"); m.ID != 3 || !m.ReadOnly() {
		t.Errorf("stacked: got %+v", m)
	}
}

func TestCgroupMode(t *testing.T) {
	hybrid := `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	legacy := `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
`
	for name, tc := range map[string]struct{ in, want string }{
		"v2":     {aclMountInfo, CgroupV2},
		"hybrid": {hybrid, CgroupHybrid},
		"v1":     {legacy, CgroupV1},
		"none":   {"22 1 259:3 / / rw - ext4 /dev/sda9 rw\n", ""},
	} {
		ms, err := ParseMountInfo(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got := CgroupMode(ms); got != tc.want {
			t.Errorf("%s: CgroupMode = %q, want %q", name, got, tc.want)
		}
	}
}

func TestDetectSysext(t *testing.T) {
	ms, err := ParseMountInfo(strings.NewReader(aclMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	s := DetectSysext(ms, "/opt/aks-flex-node", false)
	if !s.Covered || s.MountPoint != "/opt" || len(s.Evidence) != 2 {
		t.Errorf("/opt: %+v", s)
	}
	// An ordinary overlay (here on /usr/local) is not sysext.
	if s := DetectSysext(ms, "/usr/local/bin", true); s.Covered {
		t.Errorf("/usr/local: %+v", s)
	}
	// Read-only ext4 /usr is read-only but not sysext.
	if s := DetectSysext(ms, "/usr/bin", true); s.Covered {
		t.Errorf("/usr: %+v", s)
	}

	anon, err := ParseMountInfo(strings.NewReader(
		"1 0 0:1 / / rw - ext4 a rw\n2 1 0:2 / /usr ro - overlay overlay ro,lowerdir=/a:/b\n" +
			"3 1 0:3 / /srv ro - overlay overlay ro,lowerdir=/var/lib/extensions/x/srv:/srv\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := DetectSysext(anon, "/usr", false); s.Covered {
		t.Errorf("anonymous overlay without workspace: %+v", s)
	}
	if s := DetectSysext(anon, "/usr", true); !s.Covered || !strings.Contains(s.Evidence[0], sysextWorkspace) {
		t.Errorf("anonymous overlay with workspace: %+v", s)
	}
	if s := DetectSysext(anon, "/srv/x", false); !s.Covered || !strings.Contains(s.Evidence[0], "/var/lib/extensions") {
		t.Errorf("lowerdir marker: %+v", s)
	}
}

// TestReadMountInfo reads this process's own table, as the test harness
// does, and names the file in a parse error.
func TestReadMountInfo(t *testing.T) {
	ms, err := ReadMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if m := MountFor(ms, "/"); m.MountPoint != "/" {
		t.Errorf("no mount serves /: %+v", m)
	}
	bad := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(bad, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMountInfo(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: %v", err)
	}
}

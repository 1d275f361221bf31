package machine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// The exact text of both files is golden-tested with every other generated
// file in internal/genfile; these check what the options change.

func settings(t *testing.T, text string, section, name string) []string {
	t.Helper()
	opts, err := unit.DeserializeOptions(strings.NewReader(text))
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, text)
	}
	var vals []string
	for _, o := range opts {
		if o.Section == section && o.Name == name {
			vals = append(vals, o.Value)
		}
	}
	return vals
}

func TestNspawnFileBindsDevices(t *testing.T) {
	got, err := NspawnFile(Options{AdditionalHostDevices: []string{"/dev/fuse", "/dev/net/tun"}, CgroupMode: hostos.CgroupV2})
	if err != nil {
		t.Fatal(err)
	}
	if b := settings(t, got, "Files", "Bind"); !reflect.DeepEqual(b, []string{"/dev/kmsg", "/dev/fuse", "/dev/net/tun"}) {
		t.Errorf("Bind= %q", b)
	}
	if _, err := NspawnFile(Options{AdditionalHostDevices: []string{"/dev/x y"}, CgroupMode: hostos.CgroupV2}); err == nil {
		t.Error("rendered a device with a space")
	}
}

func TestNspawnFileBindsDirs(t *testing.T) {
	got, err := NspawnFile(Options{CgroupMode: hostos.CgroupV2, Binds: []Bind{
		{Source: "/opt/aks-flex-node/lib", Dest: "/opt/aks-flex-node-host/lib", ReadOnly: true},
		{Source: "/var/lib/aks-flex-node/identity", Dest: "/opt/aks-flex-node-host/identity"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b := settings(t, got, "Files", "BindReadOnly"); !reflect.DeepEqual(b, []string{"/opt/aks-flex-node/lib:/opt/aks-flex-node-host/lib"}) {
		t.Errorf("BindReadOnly= %q", b)
	}
	if b := settings(t, got, "Files", "Bind"); !reflect.DeepEqual(b, []string{"/dev/kmsg", "/var/lib/aks-flex-node/identity:/opt/aks-flex-node-host/identity"}) {
		t.Errorf("Bind= %q", b)
	}
	for _, bad := range []Bind{{Source: "/a:b", Dest: "/c"}, {Source: "/a", Dest: "relative"}, {Source: "/a b", Dest: "/c"}, {Source: "/", Dest: "/c"}} {
		if _, err := NspawnFile(Options{CgroupMode: hostos.CgroupV2, Binds: []Bind{bad}}); err == nil {
			t.Errorf("rendered bind %+v", bad)
		}
	}
}

func TestDropInFollowsCgroupMode(t *testing.T) {
	for mode, unified := range map[string]string{hostos.CgroupV2: "1", hostos.CgroupHybrid: "0", hostos.CgroupV1: "0"} {
		got, err := DropIn(Options{AdditionalHostDevices: []string{"/dev/fuse"}, CgroupMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		env := settings(t, got, "Service", "Environment")
		if want := []string{"SYSTEMD_NSPAWN_API_VFS_WRITABLE=network", "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=" + unified}; !reflect.DeepEqual(env, want) {
			t.Errorf("%s: Environment= %q, want %q", mode, env, want)
		}
		if d := settings(t, got, "Service", "DeviceAllow"); !reflect.DeepEqual(d, []string{"/dev/kmsg rw", "/dev/fuse rwm"}) {
			t.Errorf("%s: DeviceAllow= %q", mode, d)
		}
	}
	// Left to itself nspawn picks a hierarchy, and the wrong one fails
	// every pod: an unknown mode is refused, not left out.
	if _, err := DropIn(Options{}); err == nil || !strings.Contains(err.Error(), "cgroup mode") {
		t.Errorf("unknown cgroup mode: %v", err)
	}
}

func TestWriteFilesAndRemove(t *testing.T) {
	root := t.TempDir()
	o := Options{CgroupMode: hostos.CgroupHybrid}
	if _, err := WriteFiles(at(root), "kube1", Options{}); err == nil || !strings.Contains(err.Error(), "cgroup mode") {
		t.Fatalf("unknown cgroup mode accepted: %v", err)
	}
	if _, err := WriteFiles(at(root), "kube1", Options{CgroupMode: hostos.CgroupV2, AdditionalHostDevices: []string{"/dev/x y"}}); err == nil {
		t.Fatal("device with a space accepted")
	}
	if _, err := WriteFiles(at(root), "kube1", Options{CgroupMode: hostos.CgroupV2, AdditionalHostDevices: []string{"/dev/a:/etc"}}); err == nil {
		t.Fatal("device with a colon accepted")
	}
	changed, err := WriteFiles(at(root), "kube1", o)
	if err != nil || !changed {
		t.Fatalf("%v %v", changed, err)
	}
	nspawn := filepath.Join(root, "etc/systemd/nspawn/kube1.nspawn")
	dropIn := filepath.Join(root, "etc/systemd/system/systemd-nspawn@kube1.service.d/aks-flex-node.conf")
	if b, _ := os.ReadFile(nspawn); string(b) != must(NspawnFile(o)) {
		t.Errorf("nspawn file = %q", b)
	}
	if b, _ := os.ReadFile(dropIn); !strings.Contains(string(b), "UNIFIED_HIERARCHY=0") {
		t.Errorf("drop-in = %q", b)
	}
	if changed, err := WriteFiles(at(root), "kube1", o); err != nil || changed {
		t.Fatalf("rewrite: %v %v", changed, err)
	}

	os.MkdirAll(filepath.Join(Dir(at(root), "kube1"), "etc"), 0o755)
	os.MkdirAll(filepath.Join(at(root).OnRoot(at(root).MachinesDir()), ".kube1.tmp-123", "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "var/lib/aks-flex-node/machines"), 0o755)
	os.WriteFile(recordPath(at(root), "kube1"), []byte("sha256:x\n"), 0o644)
	os.MkdirAll(Dir(at(root), "kube2"), 0o755)
	if changed, err := Remove(at(root), "kube1"); err != nil || !changed {
		t.Fatalf("remove: %v %v", changed, err)
	}
	for _, p := range []string{nspawn, dropIn, filepath.Dir(dropIn), Dir(at(root), "kube1"), recordPath(at(root), "kube1"), filepath.Join(at(root).OnRoot(at(root).MachinesDir()), ".kube1.tmp-123")} {
		if exists(p) {
			t.Errorf("%s survived Remove", p)
		}
	}
	if !exists(Dir(at(root), "kube2")) {
		t.Error("Remove took the other machine")
	}
	if changed, err := Remove(at(root), "kube1"); err != nil || changed {
		t.Fatalf("second remove: %v %v", changed, err)
	}
}

func TestHostCgroupModeNeedsLiveHost(t *testing.T) {
	if _, err := HostCgroupMode(t.TempDir()); err == nil {
		t.Fatal("cgroup mode detected for a non-live root")
	}
}

// fakeHost scripts command outputs and records calls.
type fakeHost struct {
	mu    sync.Mutex
	calls []string
	f     func(cmd string) ([]byte, error)
}

func (h *fakeHost) run(_ context.Context, name string, args ...string) ([]byte, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	h.mu.Lock()
	h.calls = append(h.calls, cmd)
	h.mu.Unlock()
	return h.f(cmd)
}

func TestControlCommands(t *testing.T) {
	ctx := context.Background()
	h := &fakeHost{f: func(cmd string) ([]byte, error) {
		switch cmd {
		case "machinectl show kube1 -p Leader --value":
			return []byte("4242\n"), nil
		case "systemctl show systemd-nspawn@kube1.service -p ActiveState":
			return []byte("ActiveState=active\n"), nil
		case "nsenter -t 4242 -a -- cat /etc/os-release":
			return []byte("ID=debian\n"), nil
		}
		return nil, nil
	}}
	c := &Control{Run: h.run}
	if err := c.Start(ctx, "kube1"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, "kube1"); err != nil || st != "active" {
		t.Fatalf("state %q %v", st, err)
	}
	if pid, err := c.Leader(ctx, "kube1"); err != nil || pid != 4242 {
		t.Fatalf("leader %d %v", pid, err)
	}
	out, err := c.Exec(ctx, "kube1", "cat", "/etc/os-release")
	if err != nil || string(out) != "ID=debian\n" {
		t.Fatalf("exec %q %v", out, err)
	}
	want := []string{
		"machinectl start kube1",
		"systemctl show systemd-nspawn@kube1.service -p ActiveState",
		"machinectl show kube1 -p Leader --value",
		"machinectl show kube1 -p Leader --value",
		"nsenter -t 4242 -a -- cat /etc/os-release",
	}
	if !reflect.DeepEqual(h.calls, want) {
		t.Errorf("calls:\n%s", strings.Join(h.calls, "\n"))
	}
	if err := c.Start(ctx, "kube1; rm -rf /"); err == nil {
		t.Error("bad machine name passed to machinectl")
	}
}

func TestStopEscalatesToTerminate(t *testing.T) {
	var mu sync.Mutex
	state := "active"
	h := &fakeHost{f: func(cmd string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(cmd, "systemctl show"):
			return []byte("ActiveState=" + state + "\n"), nil
		case cmd == "machinectl poweroff kube1":
			state = "deactivating" // hangs on pod processes
		case cmd == "machinectl terminate kube1":
			state = "inactive"
		}
		return nil, nil
	}}
	c := &Control{Run: h.run, Poll: time.Millisecond, StopTimeout: 20 * time.Millisecond}
	if err := c.Stop(context.Background(), "kube1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(h.calls, "\n"), "machinectl terminate kube1") {
		t.Error("no terminate after the poweroff timeout")
	}
	// Already stopped: nothing but the state query.
	h.calls = nil
	if err := c.Stop(context.Background(), "kube1"); err != nil || len(h.calls) != 1 {
		t.Fatalf("stop of a stopped machine: %v %v", err, h.calls)
	}
}

// A process that ignores SIGTERM as a container's PID 1 keeps the
// machine deactivating through poweroff and terminate: Stop kills it.
func TestStopKillsAMachineTerminateCannotStop(t *testing.T) {
	var mu sync.Mutex
	state := "active"
	h := &fakeHost{f: func(cmd string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(cmd, "systemctl show"):
			return []byte("ActiveState=" + state + "\n"), nil
		case cmd == "machinectl poweroff kube1", cmd == "machinectl terminate kube1":
			state = "deactivating"
		case cmd == "systemctl kill --kill-whom=all --signal=SIGKILL systemd-nspawn@kube1.service":
			state = "failed"
		}
		return nil, nil
	}}
	c := &Control{Run: h.run, Poll: time.Millisecond, StopTimeout: 20 * time.Millisecond, EscalateTimeout: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Stop(ctx, "kube1"); err != nil {
		t.Fatal(err)
	}
	calls := strings.Join(h.calls, "\n")
	for _, want := range []string{"machinectl poweroff kube1", "machinectl terminate kube1", "systemctl kill --kill-whom=all --signal=SIGKILL systemd-nspawn@kube1.service"} {
		if !strings.Contains(calls, want) {
			t.Errorf("no %q in:\n%s", want, calls)
		}
	}

	// Nothing stops it: the error says what was tried and the last state.
	state = "active"
	h.f = func(cmd string) ([]byte, error) {
		if strings.HasPrefix(cmd, "systemctl show") {
			mu.Lock()
			defer mu.Unlock()
			return []byte("ActiveState=" + state + "\n"), nil
		}
		mu.Lock()
		state = "deactivating"
		mu.Unlock()
		return nil, nil
	}
	err := c.Stop(ctx, "kube1")
	if err == nil || !strings.Contains(err.Error(), "stop machine kube1: killed but still deactivating") {
		t.Fatalf("err=%v", err)
	}
}

func TestStopCleanPoweroff(t *testing.T) {
	state := "active"
	var mu sync.Mutex
	h := &fakeHost{f: func(cmd string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if cmd == "machinectl poweroff kube1" {
			state = "inactive"
		}
		return []byte("ActiveState=" + state), nil
	}}
	c := &Control{Run: h.run, Poll: time.Millisecond}
	if err := c.Stop(context.Background(), "kube1"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(h.calls, "\n"), "terminate") {
		t.Error("terminated after a clean poweroff")
	}
}

func TestWaitRunning(t *testing.T) {
	n := 0
	h := &fakeHost{f: func(cmd string) ([]byte, error) {
		switch {
		case strings.HasPrefix(cmd, "machinectl show"):
			n++
			if n < 3 {
				return nil, errors.New("machine not registered yet")
			}
			return []byte("77\n"), nil
		case cmd == "nsenter -t 77 -a -- systemctl is-system-running --wait":
			// degraded exits non-zero but is a finished boot
			return []byte("degraded\n"), errors.New("exit status 1")
		}
		return nil, nil
	}}
	c := &Control{Run: h.run, Poll: time.Millisecond}
	st, err := c.WaitRunning(context.Background(), "kube1", 5*time.Second)
	if err != nil || st != "degraded" {
		t.Fatalf("%q %v", st, err)
	}

	h.f = func(cmd string) ([]byte, error) {
		if strings.HasPrefix(cmd, "machinectl show") {
			return []byte("77\n"), nil
		}
		return []byte("starting\n"), errors.New("exit status 1")
	}
	st, err = c.WaitRunning(context.Background(), "kube1", 20*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `last state "starting"`) {
		t.Fatalf("%q %v", st, err)
	}
}

package lifecycle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/task"
)

// The task names are an interface: the e2e tests and `make bench-join`
// read them from the log lines, in this order.
func TestStartAndResetTaskNames(t *testing.T) {
	var got []string
	for _, p := range NewStart(Options{Config: &config.Config{}}).Phases("v2") {
		got = append(got, p.Name+": "+strings.Join(p.Names(), ","))
	}
	want := []string{
		"register: register-machine",
		"stage: stage-node-components",
		"host: create-layout-dirs,load-kernel-modules,apply-sysctls,disable-swap,record-host-network,apply-host-routes",
		"machine: provision-machine,install-node-components,seed-agent-slots,write-identity,write-nspawn-files,write-node-config,start-machine,import-images",
		"join: wait-tls-bootstrap,write-pod-network,wait-node-ready",
		"finish: save-state,install-agent-service,record-machine-registration,write-joined-marker",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("start phases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = nil
	for _, p := range ResetPhases(Options{}) {
		got = append(got, p.Name+": "+strings.Join(p.Names(), ","))
	}
	if s := strings.Join(got, "\n"); s != "agent: remove-agent-service\nmachines: remove-machine-kube1,remove-machine-kube2,mark-node-stopped,remove-layer-cache\nnetwork: remove-host-routes,remove-bridge-network\nhost: restore-swap\nfiles: remove-tracked-paths" {
		t.Errorf("reset phases:\n%s", s)
	}
	if d := DescribeStart(); !strings.HasPrefix(strings.TrimSpace(d), PreflightPhase) || !strings.Contains(d, "stage-node-components") {
		t.Errorf("DescribeStart:\n%s", d)
	}
}

// start-machine restarts the node in a running machine only when what it
// was handed says components or config changed.
func TestStartMachineRestartsOnlyOnChange(t *testing.T) {
	l, _ := layout.New(t.TempDir(), "", "")
	for _, tc := range []struct {
		components, config bool
		wantRestart        bool
	}{{false, false, false}, {true, false, true}, {false, true, true}} {
		var calls []string
		run := func(_ context.Context, name string, args ...string) ([]byte, error) {
			calls = append(calls, name+" "+strings.Join(args, " "))
			switch {
			case name == "systemctl" && args[0] == "show":
				return []byte("ActiveState=active\n"), nil
			case name == "machinectl" && args[0] == "show":
				return []byte("1234\n"), nil
			}
			return nil, nil
		}
		components, nodeConfig := task.NewOutput[bool]("install-node-components"), task.NewOutput[bool]("write-node-config")
		components.Set(tc.components)
		nodeConfig.Set(tc.config)
		res, err := StartMachine(NewMachine(l, layout.MachineBlue, run), unchanged("write-nspawn-files"), components, nodeConfig).Do(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		restarted := strings.Contains(strings.Join(calls, "\n"), "restart containerd.service kubelet.service")
		if restarted != tc.wantRestart || res.Changed != tc.wantRestart {
			t.Errorf("components=%v config=%v: restarted=%v changed=%v, calls %q", tc.components, tc.config, restarted, res.Changed, calls)
		}
	}
	// An input whose producer did not run is a wiring bug, named.
	run := func(context.Context, string, ...string) ([]byte, error) { return []byte("ActiveState=active\n"), nil }
	_, err := StartMachine(NewMachine(l, layout.MachineBlue, run), unchanged("write-nspawn-files"), task.NewOutput[bool]("install-node-components")).Do(context.Background())
	if err == nil || !strings.Contains(err.Error(), "install-node-components did not run") {
		t.Fatalf("unset input: %v", err)
	}
}

func unchanged(name string) *task.Output[bool] {
	o := task.NewOutput[bool](name)
	o.Set(false)
	return o
}

// New machine settings (binds) apply at boot: a running machine whose
// .nspawn file changed is powered off and started again.
func TestStartMachineRebootsForNewSettings(t *testing.T) {
	l, _ := layout.New(t.TempDir(), "", "")
	state := "active"
	var calls []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		switch {
		case name == "systemctl" && args[0] == "show":
			return []byte("ActiveState=" + state + "\n"), nil
		case name == "machinectl" && args[0] == "poweroff":
			state = "inactive"
		case name == "machinectl" && args[0] == "start":
			state = "active"
		case name == "machinectl" && args[0] == "show":
			return []byte("1234\n"), nil
		}
		return []byte("running\n"), nil
	}
	m := NewMachine(l, layout.MachineBlue, run)
	m.Control.Poll = time.Millisecond
	nspawn := task.NewOutput[bool]("write-nspawn-files")
	nspawn.Set(true)
	res, err := StartMachine(m, nspawn, unchanged("install-node-components")).Do(context.Background())
	got := strings.Join(calls, "\n")
	if err != nil {
		t.Fatalf("%v; %d calls", err, len(calls))
	}
	if !res.Changed || !strings.Contains(got, "machinectl poweroff kube1") || !strings.Contains(got, "machinectl start kube1") || !strings.Contains(got, "systemctl daemon-reload") {
		t.Errorf("changed=%v, calls:\n%s", res.Changed, got)
	}
}

var stageComponents = artifact.Components{Kubernetes: "1.35.4", Containerd: "1.6.20", Runc: "1.1.5", CNI: "1.1.1"}

// tgz is a gzipped tar of executables, by name.
func tgz(members ...string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, m := range members {
		tw.WriteHeader(&tar.Header{Name: m, Mode: 0o755, Size: int64(len(m)), Typeflag: tar.TypeReg})
		tw.Write([]byte(m))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// smallBundleAt builds a bundle at out with artifact.Build; contents are
// stand-ins that install.
func smallBundleAt(t *testing.T, out string) string {
	t.Helper()
	src := t.TempDir()
	var img bytes.Buffer
	tw := tar.NewWriter(&img)
	tw.WriteHeader(&tar.Header{Name: "index.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	files := map[string][]byte{"images/pause.tar": img.Bytes()}
	for c, rel := range artifact.BundlePaths(stageComponents, runtime.GOARCH) {
		switch c {
		case artifact.Containerd:
			files[rel] = tgz("bin/containerd", "bin/ctr")
		case artifact.CNI:
			files[rel] = tgz("./bridge", "./loopback")
		default:
			files[rel] = []byte(c + " payload")
		}
	}
	for rel, b := range files {
		os.MkdirAll(filepath.Join(src, filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(src, rel), b, 0o644)
	}
	_, err := artifact.Build(context.Background(), artifact.BuildOptions{
		Spec:    &artifact.Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: stageComponents, Images: []artifact.Image{{Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}}},
		FromDir: src, OutputDir: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testStart is a start on root (a temp dir when ""), reading the bundle
// at source, logging at debug level into logs.
func testStart(t *testing.T, root, source string, logs *bytes.Buffer) *Start {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	l, _ := layout.New(root, "/opt/aks-flex-node", "")
	c := &config.Config{}
	c.Components.Kubernetes, c.Components.Containerd, c.Components.Runc = "1.35.4", "1.6.20", "1.1.5"
	c.Networking.CNIVersion = "1.1.1"
	c.Bootstrap.OfflineArtifacts.Source = source
	o := Options{Layout: l, Config: c}
	if logs != nil {
		o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return NewStart(o)
}

// stageAndInstall are the two tasks of the bundle, wired as Phases wires
// them.
func stageAndInstall(s *Start) (stage, install task.Task, staged *task.Output[artifact.Staged]) {
	staged = task.NewOutput[artifact.Staged]("stage-node-components")
	return StageNodeComponents(s.Stager(), staged), InstallNodeComponents(s.Stager(), staged, task.NewOutput[bool]("install-node-components")), staged
}

// flipByte changes one byte of p in place.
func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stage-node-components is the gate for local bundles too: a tampered one
// fails there, naming the file, even when preflight's check was ignored,
// and nothing is handed to install-node-components.
func TestStageVerifiesLocalBundle(t *testing.T) {
	ctx := context.Background()
	s := testStart(t, "", "/srv/bundle", nil)
	dir := smallBundleAt(t, s.opts.Layout.OnRoot("/srv/bundle"))
	stage, _, staged := stageAndInstall(s)
	if res, err := stage.Do(ctx); err != nil || res.Detail != dir {
		t.Fatalf("good bundle: %+v %v", res, err)
	}
	if st, err := staged.Get(); err != nil || st.Dir != dir {
		t.Fatalf("staged: %+v %v", st, err)
	}
	rel := artifact.BundlePaths(stageComponents, runtime.GOARCH)[artifact.Kubelet]
	flipByte(t, filepath.Join(dir, rel))
	stage, install, staged := stageAndInstall(s)
	_, err := stage.Do(ctx)
	if err == nil || !strings.Contains(err.Error(), rel+": sha256") {
		t.Fatalf("tampered bundle staged: %v", err)
	}
	if st, err := staged.Get(); err == nil {
		t.Errorf("a bundle that does not verify was handed to install: %s", st.Dir)
	}
	if _, err := install.Do(ctx); err == nil || !strings.Contains(err.Error(), "stage-node-components did not run") {
		t.Errorf("install without a staged bundle: %v", err)
	}
}

// A first start hashes a local bundle once: preflight verifies it, then
// stage-node-components and install-node-components reuse that (the
// install itself still hashes what it copies).
func TestStartVerifiesBundleOnce(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	s := testStart(t, "", "/srv/bundle", &logs)
	root := s.opts.Layout.Root()
	dir := smallBundleAt(t, s.opts.Layout.OnRoot("/srv/bundle"))
	if err := os.MkdirAll(s.machine.Root(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Stager().Verify(ctx, dir); err != nil { // preflight
		t.Fatal(err)
	}
	stage, install, _ := stageAndInstall(s)
	for _, tk := range []task.Task{stage, install} {
		if _, err := tk.Do(ctx); err != nil {
			t.Fatalf("%s: %v", tk.Name(), err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 1 {
		t.Errorf("bundle verified %d times, want 1:\n%s", n, logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(s.machine.Root(), "usr/local/bin/containerd")); err != nil || string(b) != "bin/containerd" {
		t.Fatalf("installed containerd: %q %v", b, err)
	}
	// A converged re-run does not verify it again either.
	logs.Reset()
	hashed := artifact.BytesHashed()
	s2 := testStart(t, root, "/srv/bundle", &logs)
	if err := s2.Stager().Verify(ctx, dir); err != nil {
		t.Fatal(err)
	}
	stage, install, _ = stageAndInstall(s2)
	for _, tk := range []task.Task{stage, install} {
		if res, err := tk.Do(ctx); err != nil || res.Changed {
			t.Fatalf("%s on a converged host: %+v %v", tk.Name(), res, err)
		}
	}
	if n := strings.Count(logs.String(), "verified bundle"); n != 0 {
		t.Errorf("converged re-run verified the bundle %d times", n)
	}
	if n := artifact.BytesHashed() - hashed; n != 0 {
		t.Errorf("converged re-run hashed %d bytes, want 0", n)
	}
	// A bundle file changed since the converged run breaks the stamp and
	// is verified again, and refused.
	s3 := testStart(t, root, "/srv/bundle", nil)
	flipByte(t, filepath.Join(dir, artifact.BundlePaths(stageComponents, runtime.GOARCH)[artifact.Kubelet]))
	if err := s3.Stager().Verify(ctx, dir); err == nil {
		t.Fatal("tampered kubelet verified")
	}
}

// start and reset hold the node lock: while another command holds it they
// wait (bounded) and say who holds it, and a start refused that way has
// changed nothing.
func TestStartAndResetWaitForTheNodeLock(t *testing.T) {
	s := testStart(t, "", "/srv/bundle", nil)
	l := s.opts.Layout
	held, err := nodelock.TryAcquire(l, "agent-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	var told []nodelock.Holder
	s.opts.Lock = nodelock.Wait{Timeout: 200 * time.Millisecond, Notify: func(h nodelock.Holder) { told = append(told, h) }}
	_, err = s.Run(context.Background(), Preflight{})
	var he *nodelock.HeldError
	if !errors.As(err, &he) || he.Holder.Command != "agent-upgrade" || len(told) != 1 || told[0].PID != os.Getpid() {
		t.Fatalf("start while agent-upgrade holds the lock: %v (told %+v)", err, told)
	}
	_, err = Reset(context.Background(), Options{Layout: l, Lock: nodelock.Wait{}})
	if !errors.As(err, &he) || he.Holder.Command != "agent-upgrade" {
		t.Fatalf("reset while agent-upgrade holds the lock: %v", err)
	}
	held.Release()
	if _, err := os.Stat(l.OnRoot(l.StateDir())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start and reset left the state dir: %v", err)
	}
	if _, err := Reset(context.Background(), Options{Layout: l}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.OnRoot(l.StateDir())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a reset of a clean host left the state dir: %v", err)
	}
}

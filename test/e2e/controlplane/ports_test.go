package controlplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A component that finds its picked port taken exits at once and says
// so; start recognises that run as one to throw away, stops what it
// started, keeps its logs and clears etcd's data for the next attempt.
func TestLostPortIsRecognisedAndDiscarded(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	work := t.TempDir()
	c := &ControlPlane{WorkDir: work, LogsDir: filepath.Join(work, "logs")}
	for _, d := range []string{c.LogsDir, filepath.Join(work, "etcd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// This test binary plays two components, under their names.
	bin := &Options{BinDir: t.TempDir()}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := os.Symlink(self, filepath.Join(bin.BinDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CONTROLPLANE_HELPER_BIND", taken.Addr().String())
	idle, err := c.run(bin, "etcd", []string{"-test.run=^TestHelperIdle$"})
	if err != nil {
		t.Fatal(err)
	}
	binder, err := c.run(bin, "kube-apiserver", []string{"-test.run=^TestHelperBind$"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-binder.done:
	case <-time.After(time.Minute):
		t.Fatal("the helper did not exit on a taken port")
	}
	if got := c.lostPort(); got != binder.name {
		t.Fatalf("lostPort = %q, want %q; log:\n%s", got, binder.name, binder.tail(4096))
	}
	if err := c.discardAttempt(1); err != nil {
		t.Fatal(err)
	}
	if done, _ := idle.exited(); !done || len(c.procs) != 0 {
		t.Errorf("the attempt's other component still runs (exited %v, %d processes kept)", done, len(c.procs))
	}
	if _, err := os.Stat(binder.logFile + ".attempt1"); err != nil {
		t.Errorf("the attempt's log was not kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "etcd")); !os.IsNotExist(err) {
		t.Errorf("etcd's data from the discarded attempt is still there: %v", err)
	}
	if c.lostPort() != "" {
		t.Error("lostPort after the discard")
	}
}

// TestHelperBind is not a test: it is the component that finds its port
// taken, run by TestLostPortIsRecognisedAndDiscarded.
func TestHelperBind(t *testing.T) {
	addr := os.Getenv("CONTROLPLANE_HELPER_BIND")
	if addr == "" {
		t.Skip("helper process for TestLostPortIsRecognisedAndDiscarded")
	}
	if _, err := net.Listen("tcp", addr); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestHelperIdle is not a test: it is a component that runs until
// stopped, for TestLostPortIsRecognisedAndDiscarded.
func TestHelperIdle(t *testing.T) {
	if os.Getenv("CONTROLPLANE_HELPER_BIND") == "" {
		t.Skip("helper process for TestLostPortIsRecognisedAndDiscarded")
	}
	time.Sleep(time.Hour)
}

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// TestMachineKeeper drives the decision through machine.Control with a
// runner that answers systemctl like systemd does and records every call;
// the real thing runs in the join end-to-end test (power cycle, Ready again).
func TestMachineKeeper(t *testing.T) {
	cases := []struct {
		name      string
		joined    bool
		state     string
		wantStart bool
	}{
		{"never joined", false, "inactive", false},
		{"joined, running", true, "active", false},
		{"joined, booting", true, "activating", false},
		{"joined, being stopped", true, "deactivating", false},
		{"joined, stopped after reboot", true, "inactive", true},
		{"joined, failed", true, "failed", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			l, err := layout.New(root, "/opt/aks-flex-node", "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.joined {
				m := l.OnRoot(l.JoinedMarker())
				if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(m, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var calls []string
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				calls = append(calls, name+" "+strings.Join(args, " "))
				if name == "systemctl" && args[0] == "show" {
					return []byte("ActiveState=" + tc.state + "\n"), nil
				}
				return nil, nil
			}
			var log bytes.Buffer
			k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run}, Log: slog.New(slog.NewTextHandler(&log, nil))}
			if err := k.Keep(context.Background()); err != nil {
				t.Fatal(err)
			}
			started := false
			for _, c := range calls {
				if c == "machinectl start "+layout.MachineBlue {
					started = true
				}
			}
			if started != tc.wantStart {
				t.Fatalf("machinectl start called = %v, want %v (calls %q)", started, tc.wantStart, calls)
			}
			if !tc.joined && len(calls) != 0 {
				t.Fatalf("a host that never joined must not be touched; calls %q", calls)
			}
			if tc.wantStart && !strings.Contains(log.String(), "state="+tc.state) {
				t.Errorf("log does not say what state the machine was in:\n%s", log.String())
			}
		})
	}
}

// While a start (or a reset) holds the node lock the keeper skips its
// pass: it neither asks systemd nor starts the machine, and says who
// holds the lock. It does not wait for it either.
func TestMachineKeeperSkipsWhileTheNodeLockIsHeld(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		if name == "systemctl" {
			return []byte("ActiveState=inactive\n"), nil
		}
		return nil, nil
	}
	var log bytes.Buffer
	k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run}, Log: slog.New(slog.NewTextHandler(&log, nil))}
	held, err := nodelock.TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(begin) > time.Second {
		t.Errorf("the keeper waited %v for the lock", time.Since(begin))
	}
	if len(calls) != 0 {
		t.Fatalf("the keeper acted while start held the node lock: %q", calls)
	}
	if want := fmt.Sprintf("holder=\"start (pid %d) since ", os.Getpid()); !strings.Contains(log.String(), want) {
		t.Errorf("the skip does not name the holder (%s):\n%s", want, log.String())
	}
	held.Release()
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || calls[2] != "machinectl start "+layout.MachineBlue { // the state of each side, then the start
		t.Fatalf("after start released the lock: %q", calls)
	}
	// The keeper released the lock after its pass.
	if lk, err := nodelock.TryAcquire(l, "reset"); err != nil {
		t.Fatalf("lock after the keeper's pass: %v", err)
	} else {
		lk.Release()
	}
}

// A joined host whose active side is stopped while the other side runs
// (a repave killed after it started the new side): the keeper stops the
// other side before it starts the active one, never both running.
func TestMachineKeeperStopsTheOtherSideFirst(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	m := l.OnRoot(l.JoinedMarker())
	if err := os.MkdirAll(filepath.Dir(m), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{layout.MachineBlue: "inactive", layout.MachineGreen: "active"}
	var calls []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name == "systemctl" && args[0] == "show" {
			for m, st := range states {
				if args[1] == machine.ServiceName(m) {
					return []byte("ActiveState=" + st + "\n"), nil
				}
			}
		}
		if name == "machinectl" {
			calls = append(calls, args[0]+" "+args[1])
			if args[0] == "poweroff" {
				states[args[1]] = "inactive"
			}
			if states[layout.MachineBlue] == "active" && states[layout.MachineGreen] == "active" {
				t.Errorf("both machines running after %q", calls)
			}
			if args[0] == "start" {
				states[args[1]] = "active"
			}
		}
		return nil, nil
	}
	k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run, Poll: time.Millisecond}, Log: slog.New(slog.DiscardHandler)}
	if err := k.Keep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"poweroff " + layout.MachineGreen, "start " + layout.MachineBlue}; strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("machinectl calls %q, want %q", calls, want)
	}
}

package agentupgrade

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// serveAgent serves bin at /aks-flex-node on loopback and counts the
// requests.
func serveAgent(t *testing.T, bin []byte) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path != "/aks-flex-node" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(bin)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/aks-flex-node", &n
}

// Stage puts the verified binary in the inactive slot and changes nothing
// else; again, it fetches nothing; a wrong checksum names the URL (without
// its credentials), expected and got, and leaves the slot alone.
func TestStageFillsTheInactiveSlotOnly(t *testing.T) {
	l := seeded(t, "v1.0.0")
	v2 := fakeAgent("v2.0.0")
	u, n := serveAgent(t, v2)
	p, err := Stage(context.Background(), l, StageOptions{URL: u, SHA256: sum(v2)})
	if err != nil {
		t.Fatal(err)
	}
	if p.ToSlot != "agent-green" || p.ToVersion != "v2.0.0" || p.FromVersion != "v1.0.0" || p.Unchanged {
		t.Errorf("plan %+v", p)
	}
	if got, _ := os.ReadFile(slotPath(l, "agent-green")); string(got) != string(v2) {
		t.Error("the inactive slot does not hold the staged binary")
	}
	for _, link := range []string{l.UpgradeSlots().Current, l.UpgradeSlots().LastGood} {
		if s, _ := linkSlot(l, link); s != "agent-blue" {
			t.Errorf("%s names %s after staging", link, s)
		}
	}
	if r, _ := LoadInFlight(l); r != nil {
		t.Errorf("staging recorded an upgrade in flight: %+v", r)
	}
	if _, err := Stage(context.Background(), l, StageOptions{URL: u, SHA256: sum(v2)}); err != nil || n.Load() != 1 {
		t.Errorf("staging again: %v, %d requests, want 1", err, n.Load())
	}

	bad := strings.Repeat("0", 64)
	withCred := strings.Replace(u, "http://", "http://user:secret@", 1)
	os.Remove(slotPath(l, "agent-green"))
	_, err = Stage(context.Background(), l, StageOptions{URL: withCred, SHA256: bad})
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "expected "+bad+", got "+sum(v2)) || strings.Contains(err.Error(), "secret") {
		t.Errorf("wrong checksum: %v", err)
	}
	if _, err := os.Lstat(slotPath(l, "agent-green")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused binary reached the slot: %v", err)
	}
	// The current binary staged is nothing to do.
	v1, _ := os.ReadFile(slotPath(l, "agent-blue"))
	if p, err := Stage(context.Background(), l, StageOptions{URL: u + "-unused", SHA256: sum(v1)}); err != nil || !p.Unchanged {
		t.Errorf("the current binary: %+v %v", p, err)
	}
}

// Apply switches current to the staged slot with the deadline timer armed
// and the in-flight record written, and queues the agent's restart without
// waiting for it (the agent service calls it on itself). A slot
// overwritten since staging is staged again.
func TestApplySwitchesAndQueuesTheRestart(t *testing.T) {
	l := seeded(t, "v1.0.0")
	v2 := fakeAgent("v2.0.0")
	u, n := serveAgent(t, v2)
	if _, err := Stage(context.Background(), l, StageOptions{URL: u, SHA256: sum(v2)}); err != nil {
		t.Fatal(err)
	}
	put(t, slotPath(l, "agent-green"), fakeAgent("v9.9.9")) // an agent-upgrade in between
	var calls []string
	m := &systemd.Manager{Root: "/", Exec: func(_ context.Context, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		return nil, nil
	}}
	p, err := Apply(context.Background(), l, ApplyOptions{URL: u, SHA256: sum(v2), Manager: m, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if p.ToVersion != "v2.0.0" || p.ToSlot != "agent-green" || n.Load() != 2 {
		t.Errorf("plan %+v, %d requests (want the slot staged again)", p, n.Load())
	}
	if s, _ := linkSlot(l, l.UpgradeSlots().Current); s != "agent-green" {
		t.Errorf("current names %s", s)
	}
	if s, _ := linkSlot(l, l.UpgradeSlots().LastGood); s != "agent-blue" {
		t.Errorf("last-good names %s before any confirmation", s)
	}
	r, err := LoadInFlight(l)
	if err != nil || r == nil || r.ToVersion != "v2.0.0" || r.FromSlot != "agent-blue" || time.Until(r.Deadline) > time.Minute+time.Second {
		t.Errorf("in flight %+v %v", r, err)
	}
	if last := calls[len(calls)-1]; last != "systemctl restart --no-block "+layout.AgentUnitName {
		t.Errorf("calls %q: the last is not a queued restart of the agent", calls)
	}
	if !strings.Contains(strings.Join(calls, "\n"), "systemctl start "+layout.RecoveryTimer) {
		t.Errorf("calls %q: the deadline timer was not armed", calls)
	}
	// A second apply while this one is in flight is refused.
	if _, err := Apply(context.Background(), l, ApplyOptions{URL: u, SHA256: sum(v2), Manager: m}); err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("apply in flight: %v", err)
	}
	// Without the host's systemd nothing is done.
	if _, err := Apply(context.Background(), l, ApplyOptions{URL: u, SHA256: sum(v2), Manager: systemd.NewManager(l.Root())}); err == nil {
		t.Error("applied without a live systemd")
	}
}

// RolledBackSince finds recovery's rollback of an upgrade started at
// since, and not an older one's, nor a confirmation.
func TestRolledBackSince(t *testing.T) {
	l := seeded(t, "v1.0.0")
	since := time.Now().Add(-time.Minute)
	if r, err := RolledBackSince(l, since); r != nil || err != nil {
		t.Fatalf("no result: %+v %v", r, err)
	}
	res := Result{Result: ResultRolledBack, Reason: "agent stopped with result exit-code (exited 1)", FromVersion: "v1.0.0", ToVersion: "v2.0.0",
		Time: time.Now().UTC().Format(time.RFC3339), By: "recovery"}
	if err := saveResult(l, res); err != nil {
		t.Fatal(err)
	}
	if r, err := RolledBackSince(l, since); err != nil || r == nil || r.Reason != res.Reason {
		t.Errorf("rolled back: %+v %v", r, err)
	}
	if r, _ := RolledBackSince(l, time.Now().Add(time.Hour)); r != nil {
		t.Errorf("an older rollback counted: %+v", r)
	}
	res.Result = ResultUpgraded
	if err := saveResult(l, res); err != nil {
		t.Fatal(err)
	}
	if r, _ := RolledBackSince(l, since); r != nil {
		t.Errorf("a confirmation counted as a rollback: %+v", r)
	}
}

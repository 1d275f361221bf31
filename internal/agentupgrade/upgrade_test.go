package agentupgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// fakeAgent is an executable that answers `version --output json` like the
// agent does; the real binary is exercised under systemd in
// test/integration.
func fakeAgent(version string) []byte {
	return []byte("#!/bin/sh\necho '{\"version\":\"" + version + "\",\"gitCommit\":\"x\",\"buildTime\":\"y\"}'\n")
}

func testLayout(t *testing.T) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func put(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestRecoveryUnitAndScriptAgree(t *testing.T) {
	for _, prefix := range []string{"", "/opt/aks-flex-node"} {
		l, _ := layout.New("/", prefix, "")
		text, err := RenderRecoveryUnit(l)
		if err != nil {
			t.Fatal(err)
		}
		opts, err := unit.DeserializeOptions(strings.NewReader(text))
		if err != nil {
			t.Fatalf("recovery unit does not parse: %v", err)
		}
		var exec string
		for _, o := range opts {
			if o.Section == "Service" && o.Name == "ExecStart" {
				exec = o.Value
			}
		}
		// The unit's ExecStart= and the path the script is written to
		// must be the same path.
		if f := strings.Fields(exec); len(f) == 0 || f[0] != l.RecoveryScript() {
			t.Errorf("prefix %q: ExecStart=%q does not run %s", prefix, exec, l.RecoveryScript())
		}
		script, err := RenderRecoveryScript(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"readonly LIB_DIR=" + l.LibDir() + "\n", "readonly CURRENT=" + l.UpgradeSlots().Current + "\n",
			"readonly LAST_GOOD=" + l.UpgradeSlots().LastGood + "\n", "readonly STATE_DIR=" + l.StateDir() + "\n",
			"readonly RECOVERY_UNIT=" + layout.RecoveryUnit + "\n", "readonly TIMER_UNIT=" + layout.RecoveryTimer + "\n",
			"\tagent-blue | agent-green) ;;\n", "$STATE_DIR/" + InFlightFile + "\"", "set -euo pipefail"} {
			if !strings.Contains(script, want) {
				t.Errorf("prefix %q: script lacks %q", prefix, want)
			}
		}
		if timer, err := RenderRecoveryTimer(); err != nil || !strings.Contains(timer, "Unit="+layout.RecoveryUnit+"\n") {
			t.Error("timer does not start the recovery unit")
		}
	}
	if _, err := layout.New("/", "/opt/$(reboot)", ""); err == nil {
		t.Error("layout.New accepted a prefix a shell would expand")
	}
	var notFromNew layout.Layout
	if _, err := RenderRecoveryScript(notFromNew); !errors.Is(err, layout.ErrNotFromNew) {
		t.Errorf("rendered a script for a layout layout.New did not make: %v", err)
	}
	if _, err := RenderRecoveryUnit(notFromNew); !errors.Is(err, layout.ErrNotFromNew) {
		t.Errorf("rendered a unit for a layout layout.New did not make: %v", err)
	}
}

// TestRenderedScriptShellcheck renders the script and lints it, so make
// lint (and this test) checks what hosts actually run.
func TestRenderedScriptShellcheck(t *testing.T) {
	sc, err := lookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not installed (scripts/ci-deps.sh installs it; make lint runs it)")
	}
	for _, prefix := range []string{"", "/opt/aks-flex-node"} {
		l, _ := layout.New("/", prefix, "")
		script, _ := RenderRecoveryScript(l)
		p := filepath.Join(t.TempDir(), "recovery.sh")
		put(t, p, []byte(script))
		if out, err := runCmd(sc, p); err != nil {
			t.Errorf("shellcheck of the script rendered for prefix %q: %v\n%s", prefix, err, out)
		}
	}
}

func TestSeedFirstInstallIdempotentAndAdopt(t *testing.T) {
	ctx := context.Background()
	l := testLayout(t)
	bin := l.OnRoot(l.AgentBinary())
	if _, err := Seed(ctx, l); err == nil || !strings.Contains(err.Error(), l.AgentBinary()) {
		t.Fatalf("seed without a binary: %v", err)
	}
	v1 := fakeAgent("v1.0.0")
	put(t, bin, v1)
	res, err := Seed(ctx, l)
	if err != nil || !res.Changed || res.Slot != "agent-blue" {
		t.Fatalf("first seed: %+v %v", res, err)
	}
	for _, link := range []string{l.UpgradeSlots().Current, l.UpgradeSlots().LastGood} {
		if s, err := linkSlot(l, link); s != "agent-blue" || err != nil {
			t.Errorf("%s -> %q %v", link, s, err)
		}
	}
	if target, err := os.Readlink(bin); err != nil || target != l.UpgradeSlots().Current {
		t.Errorf("agentBinary is %q %v, want a link to %s", target, err, l.UpgradeSlots().Current)
	}
	if res, err := Seed(ctx, l); err != nil || res.Changed {
		t.Fatalf("second seed changed something: %+v %v", res, err)
	}

	// install.sh on a seeded host renames a new regular file over the link.
	v2 := fakeAgent("v2.0.0")
	put(t, bin+".new", v2)
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(slotPath(l, "agent-blue")); string(got) != string(v1) {
		t.Fatal("replacing agentBinary wrote through the link into a slot")
	}
	res, err = Seed(ctx, l)
	if err != nil || !res.Adopted || res.Slot != "agent-green" {
		t.Fatalf("adopt: %+v %v", res, err)
	}
	if s, _ := linkSlot(l, l.UpgradeSlots().LastGood); s != "agent-green" {
		t.Errorf("last-good after adopt: %s", s)
	}
	if target, _ := os.Readlink(bin); target != l.UpgradeSlots().Current {
		t.Errorf("agentBinary link not restored after adopt: %q", target)
	}
	if got, _ := os.ReadFile(slotPath(l, "agent-green")); string(got) != string(v2) {
		t.Errorf("the adopted slot does not hold the new binary")
	}

	// Half-seeded (crash between the two links) is repaired.
	os.Remove(l.OnRoot(l.UpgradeSlots().LastGood))
	if res, err := Seed(ctx, l); err != nil || !res.Changed {
		t.Fatalf("repair: %+v %v", res, err)
	}
	if s, _ := linkSlot(l, l.UpgradeSlots().LastGood); s != "agent-green" {
		t.Errorf("last-good after repair: %s", s)
	}

	// No adoption while an upgrade is in flight.
	if err := saveInFlight(l, InFlight{FromSlot: "agent-green", ToSlot: "agent-blue", ToVersion: "v3.0.0", Deadline: time.Now()}); err != nil {
		t.Fatal(err)
	}
	os.Remove(bin)
	put(t, bin, fakeAgent("v4.0.0"))
	if _, err := Seed(ctx, l); err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("adopted during an upgrade: %v", err)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	l := testLayout(t)
	if r, err := LoadInFlight(l); r != nil || err != nil {
		t.Fatalf("empty: %v %v", r, err)
	}
	in := InFlight{FromSlot: "agent-blue", FromVersion: "v1", ToSlot: "agent-green", ToVersion: "v2",
		Deadline: time.Unix(1_900_000_000, 0), Started: time.Unix(1_899_999_000, 0).UTC()}
	if err := saveInFlight(l, in); err != nil {
		t.Fatal(err)
	}
	got, err := LoadInFlight(l)
	if err != nil || got.ToSlot != in.ToSlot || !got.Deadline.Equal(in.Deadline) || !got.Started.Equal(in.Started) {
		t.Fatalf("in flight: %+v %v", got, err)
	}
	res := Result{Result: ResultRolledBack, Reason: "agent stopped\nwith a newline", ToVersion: "v2"}
	if err := saveResult(l, res); err != nil {
		t.Fatal(err)
	}
	r, err := LoadResult(l)
	if err != nil || r.Result != ResultRolledBack || r.Reason != "agent stopped with a newline" {
		t.Fatalf("result: %+v %v", r, err)
	}
	if err := clearInFlight(l); err != nil {
		t.Fatal(err)
	}
	if r, _ := LoadInFlight(l); r != nil {
		t.Fatal("in-flight record survived clear")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
		ok   bool
	}{{"v2.0.0", "v1.0.0-test", 1, true}, {"v1.0.0", "v1.0.0", 0, true}, {"1.2.3", "v1.10.0", -1, true}, {"v3.0.0-exit", "v2.0.0", 1, true}, {"dev", "v1.0.0", 0, false}} {
		got, ok := compareVersions(c.a, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("compare(%s, %s) = %d %t", c.a, c.b, got, ok)
		}
	}
}

func seeded(t *testing.T, version string) layout.Layout {
	t.Helper()
	l := testLayout(t)
	put(t, l.OnRoot(l.AgentBinary()), fakeAgent(version))
	if _, err := Seed(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

func offline(l layout.Layout) Options {
	return Options{Manager: systemd.NewManager(l.Root()), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Preflight: true}
}

func TestPreflightFromURLVerifiesAndChangesNothing(t *testing.T) {
	l := seeded(t, "v1.0.0")
	v2 := fakeAgent("v2.0.0")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/aks-flex-node" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(v2)
	}))
	defer srv.Close()
	o := offline(l)
	o.URL, o.SHA256 = srv.URL+"/aks-flex-node", sum(v2)
	out, err := Run(context.Background(), l, o)
	if err != nil {
		t.Fatal(err)
	}
	if p := out.Plan; p.FromVersion != "v1.0.0" || p.ToVersion != "v2.0.0" || p.ToSlot != "agent-green" || p.Downgrade {
		t.Errorf("plan: %+v", p)
	}
	if _, err := os.Lstat(slotPath(l, "agent-green")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("preflight wrote the inactive slot: %v", err)
	}
	if m, _ := filepath.Glob(l.OnRoot(l.LibDir() + "/.candidate-*")); len(m) > 0 {
		t.Errorf("preflight left %v", m)
	}

	var re *RefusedError
	o.SHA256 = strings.Repeat("0", 64)
	if _, err := Run(context.Background(), l, o); !errors.As(err, &re) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("bad checksum: %v", err)
	}
	o.URL, o.SHA256 = srv.URL+"/missing", sum(v2)
	if _, err := Run(context.Background(), l, o); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
}

func TestDowngradeAndInFlightRefused(t *testing.T) {
	l := seeded(t, "v2.0.0")
	old := fakeAgent("v1.0.0")
	put(t, filepath.Join(t.TempDir(), "x"), nil)
	p := filepath.Join(t.TempDir(), "old")
	put(t, p, old)
	o := offline(l)
	o.Binary, o.SHA256 = p, sum(old)
	var re *RefusedError
	if _, err := Run(context.Background(), l, o); !errors.As(err, &re) || !strings.Contains(err.Error(), "--allow-downgrade") {
		t.Fatalf("downgrade: %v", err)
	}
	o.AllowDowngrade = true
	if out, err := Run(context.Background(), l, o); err != nil || !out.Plan.Downgrade {
		t.Fatalf("allowed downgrade: %+v %v", out, err)
	}
	// The same binary again is nothing to do.
	cur, _ := os.ReadFile(slotPath(l, "agent-blue"))
	o.Binary, o.SHA256 = slotPath(l, "agent-blue"), sum(cur)
	if out, err := Run(context.Background(), l, o); err != nil || !out.Plan.Unchanged {
		t.Fatalf("same binary: %+v %v", out, err)
	}
	if err := saveInFlight(l, InFlight{FromVersion: "v2.0.0", ToVersion: "v3.0.0", Deadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), l, o); err == nil || !strings.Contains(err.Error(), "already in flight") {
		t.Fatalf("in flight: %v", err)
	}
}

func TestURLRules(t *testing.T) {
	for u, ok := range map[string]bool{"https://example.invalid/a": true, "http://127.0.0.1:8080/a": true, "http://[::1]/a": true,
		"http://localhost/a": true, "http://10.0.0.1/a": false, "ftp://127.0.0.1/a": false, "http://example.invalid/a": false} {
		// checkURL only: nothing here may reach a non-loopback address.
		parsed, perr := url.Parse(u)
		if perr != nil {
			t.Fatal(perr)
		}
		err := checkURL(parsed)
		var re *RefusedError
		refused := errors.As(err, &re)
		if refused == ok {
			t.Errorf("%s: refused=%t err=%v", u, refused, err)
		}
	}
}

// agent-upgrade holds the node lock: while a start holds it, an upgrade
// with no wait is refused naming the start, and goes ahead once it ends.
func TestUpgradeTakesTheNodeLock(t *testing.T) {
	l := seeded(t, "v1.0.0")
	v2 := fakeAgent("v2.0.0")
	p := filepath.Join(t.TempDir(), "v2")
	put(t, p, v2)
	o := offline(l)
	o.Binary, o.SHA256 = p, sum(v2)
	held, err := nodelock.TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	var he *nodelock.HeldError
	if _, err := Run(context.Background(), l, o); !errors.As(err, &he) || he.Holder.Command != "start" {
		t.Fatalf("upgrade while start holds the node lock: %v", err)
	}
	held.Release()
	if _, err := Run(context.Background(), l, o); err != nil {
		t.Fatalf("upgrade after start released the lock: %v", err)
	}
}

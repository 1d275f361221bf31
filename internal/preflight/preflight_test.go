package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fakeChecks are deterministic: one of each kind, in an order that is not
// sorted by name or severity, so the report's order is visibly the
// registration order.
func fakeChecks() []Check {
	fixed := func(name, target string, r Result) Check {
		return NewCheck(name, target, func(context.Context) Result { return r })
	}
	return []Check{
		fixed("zeta-ok", "/z", OK("")),
		fixed("swap", "/proc/swaps", Warning("remove swap entries from /etc/fstab", "swap is on (/swapfile)")),
		fixed("host-layout", "/usr/local/bin, /usr/local/lib/aks-flex-node",
			Error("set agent.hostPrefix, e.g. /opt/aks-flex-node", "/usr/local/bin: would be created in /usr, but /usr is mounted read-only")),
		fixed("kernel-modules", "overlay, br_netfilter", Error("install the kernel modules package", "br_netfilter: not loaded")),
		fixed("alpha-ok", "/a", OK("with a note")),
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", p, got, want)
	}
}

func TestReportGolden(t *testing.T) {
	rep := Run(context.Background(), fakeChecks(), Options{IgnoreErrors: []string{"kernel-modules"}})
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json.golden", append(j, '\n'))
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.txt.golden", text.Bytes())

	if rep.Status != StatusFailed || !rep.Failed(false) {
		t.Errorf("status %s with an unignored error", rep.Status)
	}
	if s := rep.Summary; s.OK != 2 || s.Warnings != 2 || s.Errors != 1 || s.Ignored != 1 {
		t.Errorf("summary %+v", s)
	}
}

func TestIgnoreAndFailOnWarnings(t *testing.T) {
	rep := Run(context.Background(), fakeChecks(), Options{IgnoreErrors: []string{IgnoreAll}})
	if rep.Status != StatusOK || rep.Failed(false) || !rep.Failed(true) {
		t.Errorf("all ignored: status %s failed(false)=%t failed(true)=%t", rep.Status, rep.Failed(false), rep.Failed(true))
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	out := text.String()
	for _, s := range []string{"[WARNING host-layout]: /usr/local/bin", "(error ignored with --ignore-preflight-errors)", "[WARNING kernel-modules]"} {
		if !strings.Contains(out, s) {
			t.Errorf("text lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "[ERROR") || strings.Contains(out, "fatal errors") {
		t.Errorf("ignored errors shown as fatal:\n%s", out)
	}

	rep = Run(context.Background(), fakeChecks()[:2], Options{FailOnWarnings: true})
	text.Reset()
	_ = rep.WriteText(&text)
	if rep.Status != StatusFailed || !strings.Contains(text.String(), "Warnings are fatal with --fail-on-warnings") {
		t.Errorf("fail-on-warnings: status %s\n%s", rep.Status, text.String())
	}
	if rep := Run(context.Background(), fakeChecks()[:1], Options{FailOnWarnings: true}); rep.Status != StatusOK {
		t.Errorf("all ok: status %s", rep.Status)
	}
}

func TestRunIsConcurrentAndOrdered(t *testing.T) {
	const n = 8
	var running, peak atomic.Int32
	var checks []Check
	for i := range n {
		name := string(rune('a' + i))
		checks = append(checks, NewCheck(name, name, func(context.Context) Result {
			cur := running.Add(1)
			for {
				p := peak.Load()
				if cur <= p || peak.CompareAndSwap(p, cur) {
					break
				}
			}
			// Later checks finish first.
			time.Sleep(time.Duration(n-i) * 5 * time.Millisecond)
			running.Add(-1)
			return OK("%d", i)
		}))
	}
	checks = append(checks, NewCheck("boom", "x", func(context.Context) Result { panic("kaboom") }))
	rep := Run(context.Background(), checks, Options{})
	if peak.Load() < 2 {
		t.Errorf("checks did not overlap (peak %d)", peak.Load())
	}
	for i, c := range rep.Checks[:n] {
		if c.Name != string(rune('a'+i)) {
			t.Fatalf("order: %v", Names(checks))
		}
	}
	last := rep.Checks[n]
	if last.Severity != SeverityError || !strings.Contains(last.Message, "kaboom") || last.Remedy == "" {
		t.Errorf("panic not reported as an error: %+v", last)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{IgnoreErrors: []string{" Swap", "", "kernel-modules"}}
	if err := o.Validate(DefaultNames); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.IgnoreErrors, ",") != "swap,kernel-modules" || !o.ignored("swap") || o.ignored("systemd") {
		t.Errorf("normalised to %v", o.IgnoreErrors)
	}
	o = Options{IgnoreErrors: []string{"ALL"}}
	if err := o.Validate(DefaultNames); err != nil || !o.ignored("anything") {
		t.Errorf("all: %v %v", err, o.IgnoreErrors)
	}
	o = Options{IgnoreErrors: []string{"swap", "swapp"}}
	err := o.Validate(DefaultNames)
	var ue *UnknownCheckError
	if !errors.As(err, &ue) || len(ue.Names) != 1 || ue.Names[0] != "swapp" {
		t.Fatalf("unknown name: %v", err)
	}
	for _, n := range append([]string{`"swapp"`, IgnoreAll}, DefaultNames...) {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error does not list %s: %v", n, err)
		}
	}
}

func TestAddFlags(t *testing.T) {
	fs := pflag.NewFlagSet("start", pflag.ContinueOnError)
	var o Options
	AddFlags(fs, &o)
	if err := fs.Parse([]string{"--ignore-preflight-errors=swap,disk-space", "--ignore-preflight-errors", "cgroups", "--fail-on-warnings"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.IgnoreErrors, ",") != "swap,disk-space,cgroups" || !o.FailOnWarnings {
		t.Errorf("parsed %+v", o)
	}
}

// snapshot records every entry under dir: type, permissions, content and
// link target. Directory mtimes are left out on purpose: creating and
// removing the probe dir touches its parent's, and nothing else may change.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b) + " " + fi.ModTime().String()
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPreflightChangesNothing(t *testing.T) {
	srv := newFakeAPIServer(t)
	for _, prefix := range []string{"", "/opt/aks-flex-node"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			h := hostFor(t, srv, certPEM(srv.Certificate()))
			if prefix != "" {
				h.set("agent.hostPrefix", prefix)
			}
			// Everything the checks look at, so each of them reads something.
			for _, tool := range []string{"apt-get", "systemd-nspawn", "nsenter", "mount", "ip"} {
				h.exec("usr/bin/" + tool)
			}
			h.file("var/lib/dpkg/status", "")
			h.mkdir("var/lib/machines/kube1")
			h.file("etc/systemd/system/aks-flex-node-agent.service", "[Service]\n")
			h.file("var/lib/aks-flex-node/state.json", `{"configSHA256": "00"}`)
			h.file("lib/modules/6.8.0-test/modules.builtin", "kernel/fs/overlayfs/overlay.ko\n")
			h.file("lib/modules/6.8.0-test/kernel/net/bridge/br_netfilter.ko", "")
			h.procFile("modules", "")
			h.set("bootstrap.offlineArtifacts.source", "/var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}")
			h.file("var/lib/aks-flex-node/bundles/k8s-1.35.0/manifest.json", `{"files": [{"path": "kubelet"}]}`)
			h.file("var/lib/aks-flex-node/bundles/k8s-1.35.0/kubelet", "elf")
			if err := os.Symlink("/usr/lib/os-release", filepath.Join(h.root, "etc/os-release.link")); err != nil {
				t.Fatal(err)
			}
			env := h.env()
			beforeRoot, beforeProc := snapshot(t, h.root), snapshot(t, h.proc)

			rep := Run(context.Background(), Checks(env), Options{})

			if len(rep.Checks) != len(DefaultNames) {
				t.Fatalf("ran %d checks", len(rep.Checks))
			}
			for _, c := range rep.Checks {
				if c.Severity != SeverityOK && c.Remedy == "" {
					t.Errorf("%s: %s without a remedy: %s", c.Name, c.Severity, c.Message)
				}
			}
			afterRoot, afterProc := snapshot(t, h.root), snapshot(t, h.proc)
			diff(t, "root", beforeRoot, afterRoot)
			diff(t, "proc", beforeProc, afterProc)
			j, _ := json.Marshal(rep)
			if bytes.Contains(j, []byte(testSecret)) {
				t.Error("the bootstrap token secret is in the report")
			}
		})
	}
}

func diff(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if a, ok := after[k]; !ok {
			t.Errorf("%s: %s was removed", what, k)
		} else if a != v {
			t.Errorf("%s: %s changed: %q -> %q", what, k, v, a)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s was created", what, k)
		}
	}
}

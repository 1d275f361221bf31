package refdocs

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the generated pages under docs/reference")

// root is the repository, from this package's directory.
const root = "../.."

// The committed reference pages are what the code renders now, byte for
// byte: a new command, flag, config key, default, phase, task or check
// fails here until `make docs` rewrites the pages.
func TestReferenceDocsUpToDate(t *testing.T) {
	pages, err := Pages()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := Write(root); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range sortedKeys(pages) {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v; run `make docs`", p, err)
			continue
		}
		if !bytes.Equal(got, pages[p]) {
			t.Errorf("%s differs from what the code renders (first difference at line %d); run `make docs`", p, firstDiffLine(got, pages[p]))
		}
	}
}

func firstDiffLine(a, b []byte) int {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// Every note names something the code has: a note left behind by a
// rename or a removal would otherwise sit unused.
func TestNotesNameWhatTheCodeHas(t *testing.T) {
	for _, c := range []struct {
		file  string
		notes string
		known map[string]bool
	}{
		{"notes/config.md", configNotesFile, configPaths()},
		{"notes/preflight.md", preflightNotesFile, checkNames()},
		{"notes/phases.md", phaseNotesFile, taskNames()},
		{"notes/commands.md", commandNotesFile, commandPaths()},
	} {
		_, order, err := parseNotes(c.notes)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if len(order) == 0 {
			t.Errorf("%s: no notes parsed", c.file)
		}
		for _, n := range order {
			if !c.known[n] {
				t.Errorf("%s: %q is not a name the code has", c.file, n)
			}
		}
	}
}

// Every key and check has its note; Pages fails otherwise, but this names
// all of them at once.
func TestEveryKeyAndCheckHasANote(t *testing.T) {
	for _, c := range []struct {
		file  string
		notes string
		known map[string]bool
	}{
		{"notes/config.md", configNotesFile, configPaths()},
		{"notes/preflight.md", preflightNotesFile, checkNames()},
	} {
		notes, _, err := parseNotes(c.notes)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range sortedKeys(c.known) {
			if _, ok := notes[n]; !ok {
				t.Errorf("%s has no note for %q", c.file, n)
			}
		}
	}
}

// The schema walk sees what the code declares: a nested key, a list of
// objects, a secret and a default.
func TestConfigKeysFromTheSchema(t *testing.T) {
	keys := map[string]configKey{}
	for _, k := range configKeys() {
		keys[k.Path] = k
	}
	for path, want := range map[string]configKey{
		"agent.hostPrefix":                    {Type: "string"},
		"node.maxPods":                        {Type: "integer", Default: "`110`"},
		"azure.bootstrapToken.token":          {Type: "string", Secret: true},
		"azure.servicePrincipal.clientSecret": {Type: "string", Secret: true},
		"azure.servicePrincipal.clientId":     {Type: "string"},
		"hostRouting.staticRoutes.routes[]":   {Type: "list of `{destination, gateway, dev, metric}`"},
		"agent.nodeName":                      {Type: "string", Default: "the host's name, lowercased"},
	} {
		want.Path = path
		if got := keys[path]; got != want {
			t.Errorf("%s: got %+v, want %+v", path, got, want)
		}
	}
}

// Every relative link in README.md and docs/ resolves, anchors included.
func TestNoDeadLinks(t *testing.T) {
	dead, err := DeadLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		t.Error(d)
	}
}

// The checker finds what it is for: a missing file, a missing anchor, and
// nothing in a code block.
func TestDeadLinksFindsDeadLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "[a](docs/a.md#the-heading) [b](docs/b.md) [c](docs/a.md#nope) [w](https://example.invalid/x)\n```\n[d](docs/d.md)\n```\n`[e](docs/e.md)`\n")
	write("docs/a.md", "# The heading\n\n[up](../README.md) [self](#the-heading) [gone](#gone)\n")
	dead, err := DeadLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:1: docs/b.md: no such file",
		"README.md:1: docs/a.md#nope: no heading with anchor #nope in docs/a.md",
		"docs/a.md:3: #gone: no heading with anchor #gone in docs/a.md",
	}
	if strings.Join(dead, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(dead, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Node upgrade: blue/green repave":                       "node-upgrade-bluegreen-repave",
		"`networking.mode cluster`: the cluster's CNI":          "networkingmode-cluster-the-clusters-cni",
		"Day 2: debug, support bundle, health, metrics, Events": "day-2-debug-support-bundle-health-metrics-events",
		"aks-flex-node config validate":                         "aks-flex-node-config-validate",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// docs/code-map.md places every package under internal/ in a tier: a new
// package without a line there fails here.
func TestCodeMapNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docs/code-map.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "internal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.Contains(string(data), "| `"+e.Name()+"`") {
			t.Errorf("docs/code-map.md has no row for internal/%s", e.Name())
		}
	}
}

// Every .PHONY target has a rule, and every `make X` the docs tell a
// reader to run exists.
func TestMakeTargetsExist(t *testing.T) {
	problems, err := MakeProblems(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestMakeProblemsFindsThem(t *testing.T) {
	dir := t.TempDir()
	for p, s := range map[string]string{
		"Makefile":      ".PHONY: build ghost\nbuild:\n\tgo build\n",
		"README.md":     "Run `make build`, then `KEEP=1 make nothere`.\n",
		"docs/a/b.md":   "`make build PKG=x`\n",
		"docs/skip.txt": "`make nope`\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := MakeProblems(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Makefile: .PHONY declares ghost, which has no rule",
		"README.md: `make nothere`: the Makefile has no rule nothere",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// With command groups, the index follows them as --help does (in the
// order the commands were added: the cli package turns cobra's sorting
// off so start comes first), and a command in no group is listed last.
func TestIndexByGroups(t *testing.T) {
	root := &cobra.Command{Use: "x"}
	root.AddGroup(&cobra.Group{ID: "join", Title: "Join and leave:"})
	start := &cobra.Command{Use: "start", Short: "Join", GroupID: "join", Run: func(*cobra.Command, []string) {}}
	version := &cobra.Command{Use: "version", Run: func(*cobra.Command, []string) {}}
	node := &cobra.Command{Use: "node", GroupID: "join"}
	node.AddCommand(&cobra.Command{Use: "upgrade", Short: "Repave", Run: func(*cobra.Command, []string) {}})
	root.AddCommand(version, start, node)
	var b strings.Builder
	writeIndex(&b, root)
	want := "Join and leave\n\n" +
		"- [`x start`](#x-start): Join\n" +
		"- [`x node`](#x-node)\n" +
		"- [`x node upgrade`](#x-node-upgrade): Repave\n\n" +
		"Other commands\n\n" +
		"- [`x version`](#x-version)\n\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

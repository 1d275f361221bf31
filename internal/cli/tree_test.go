package cli

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// walk calls f on every command under c, c included.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// mostArgs is the largest number of positional arguments c accepts, up
// to limit; limit itself means it takes any number.
func mostArgs(c *cobra.Command, limit int) int {
	most := -1
	for n := range limit + 1 {
		if c.ValidateArgs(make([]string, n)) == nil {
			most = n
		}
	}
	return most
}

// Every command in the tree, given one positional argument more than it
// takes, exits 2 (usage), before it does anything.
func TestEveryCommandWithAnArgumentTooManyExits2(t *testing.T) {
	const limit = 8
	leaves := 0
	walk(NewRootCommand(io.Discard, io.Discard), func(c *cobra.Command) {
		if !c.HasParent() {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		most := mostArgs(c, limit)
		switch {
		case most == limit:
			t.Errorf("%s takes any number of arguments: give it a bound", c.CommandPath())
			return
		case most < 0:
			t.Errorf("%s takes no count of arguments up to %d", c.CommandPath(), limit)
			return
		}
		if !c.HasSubCommands() {
			leaves++
		}
		args := append(path, slices.Repeat([]string{"extra"}, most+1)...)
		if _, errOut, code := run(t, args...); code != ExitInvalid {
			t.Errorf("%s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, ExitInvalid, errOut)
		}
	})
	if leaves < 30 {
		t.Errorf("walked %d leaf commands; the tree has more", leaves)
	}
}

// The case: check-dir takes one directory.
func TestHostCheckDirTwoArgsExits2(t *testing.T) {
	_, errOut, code := run(t, "host", "check-dir", "a", "b")
	if code != ExitInvalid || !strings.Contains(errOut, "accepts 1 arg(s), received 2") {
		t.Fatalf("host check-dir a b: exit %d, stderr %q", code, errOut)
	}
}

// A parent run without a subcommand exits 2 and names every subcommand
// it has, as the tree has them.
func TestParentsNameTheirSubcommands(t *testing.T) {
	parents := 0
	walk(NewRootCommand(io.Discard, io.Discard), func(c *cobra.Command) {
		if !c.HasParent() || !c.HasSubCommands() || c.Name() == "debug" {
			return
		}
		parents++
		path := strings.Fields(c.CommandPath())[1:]
		_, errOut, code := run(t, path...)
		if code != ExitInvalid || !strings.Contains(errOut, "name a subcommand") {
			t.Errorf("%s: exit %d, stderr %q", c.CommandPath(), code, errOut)
		}
		for _, sub := range c.Commands() {
			if !sub.Hidden && !strings.Contains(errOut, sub.Name()) { // issue 30: a hidden one (node switch-back) is not named
				t.Errorf("%s does not name its subcommand %s: %q", c.CommandPath(), sub.Name(), errOut)
			}
		}
	})
	if parents < 8 {
		t.Errorf("found %d parent commands; the tree has more", parents)
	}
	if _, errOut, _ := run(t, "image"); !strings.Contains(errOut, "build, check or push") {
		t.Errorf("image: %q", errOut)
	}
	if _, errOut, code := run(t, "image", "biuld"); code != ExitInvalid || !strings.Contains(errOut, `unknown command "biuld" for "aks-flex-node image"; did you mean build?`) {
		t.Errorf("image biuld: exit %d, %q", code, errOut)
	}
	// debug runs its checks when run alone; it has a subcommand too.
	if c, _, err := NewRootCommand(io.Discard, io.Discard).Find([]string{"debug"}); err != nil || !c.Runnable() {
		t.Errorf("debug is not runnable alone: %v", err)
	}
}

// --help lists the top level in groups, start first; no command is left
// outside a group.
func TestHelpGroupsStartFirst(t *testing.T) {
	root := NewRootCommand(io.Discard, io.Discard)
	for _, c := range root.Commands() {
		if c.GroupID == "" {
			t.Errorf("%s is in no group", c.Name())
		}
	}
	out, _, code := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	var listed []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "  ") && len(f) > 1 && !strings.HasPrefix(f[0], "-") && f[0] != "aks-flex-node" {
			listed = append(listed, f[0])
		}
	}
	if len(listed) == 0 || listed[0] != "start" {
		t.Fatalf("--help lists %q first, want start:\n%s", listed, out)
	}
	prev := -1
	for _, title := range []string{"Join and leave:", "Fleet and cluster:", "Day 2:", "Provisioning:", "Building:", "Setup:"} {
		i := strings.Index(out, "\n"+title+"\n")
		if i < prev {
			t.Errorf("group %q missing or out of order:\n%s", title, out)
		}
		prev = i
	}
	for _, want := range []string{"completion", "help"} {
		if !slices.Contains(listed, want) {
			t.Errorf("--help does not list %s", want)
		}
	}
}

// The bash script sources in a real bash without error and registers
// its completion function for the command.
func TestCompletionBashSources(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to check the completion script: %v", err)
	}
	script, errOut, code := run(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d, stderr %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "aks-flex-node.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bash, "--norc", "--noprofile", "-c", `set -euo pipefail
source "$1"
complete -p aks-flex-node`, "bash", file).CombinedOutput()
	// Only complete's line: anything else bash printed is an error.
	got := strings.TrimSpace(string(out))
	if err != nil || strings.Contains(got, "\n") || !strings.HasSuffix(got, "-F __start_aks-flex-node aks-flex-node") {
		t.Fatalf("bash sourcing the script: %v\n%s", err, out)
	}
}

// What the scripts ask the binary (its hidden __complete command) comes
// from the tree: commands, a parent's subcommands, a command's flags.
func TestCompletionFromTheTree(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"sta"}, []string{"start", "status"}},
		{[]string{"image", ""}, []string{"build", "check", "push"}},
		{[]string{"completion", ""}, []string{"bash", "fish", "zsh"}},
		{[]string{"host", "inspect", "--custom"}, []string{"--custom-data"}},
	} {
		out, errOut, code := run(t, append([]string{"__complete"}, c.args...)...)
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Split(line, "\t"); f[0] != "" && !strings.HasPrefix(f[0], ":") {
				got = append(got, f[0])
			}
		}
		for _, w := range c.want {
			if code != 0 || !slices.Contains(got, w) {
				t.Errorf("complete %q: exit %d, got %q, want %s (stderr %q)", c.args, code, got, w, errOut)
			}
		}
	}
}

// zsh and fish scripts come from the same tree.
func TestCompletionZshFish(t *testing.T) {
	for sh, want := range map[string]string{"zsh": "#compdef aks-flex-node", "fish": "complete -c aks-flex-node"} {
		if out, errOut, code := run(t, "completion", sh); code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, no %q", sh, code, errOut, want)
		}
	}
}

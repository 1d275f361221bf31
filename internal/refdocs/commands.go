package refdocs

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/Azure/aks-flex-node/internal/cli"
)

// Commands renders the command reference from the tree the binary runs:
// every command that is not hidden, in the tree's order, with its usage,
// aliases, description and flags.
func Commands() (string, error) {
	notes, _, err := parseNotes(commandNotesFile)
	if err != nil {
		return "", fmt.Errorf("notes/commands.md: %w", err)
	}
	root := cli.NewRootCommand(io.Discard, io.Discard)
	// cobra adds its default completion command only when the program
	// runs; add it now, as Execute would, so the page has what --help has
	// (a no-op when the program turned it off or has its own).
	root.InitDefaultCompletionCmd()
	var b strings.Builder
	b.WriteString("# Command reference\n\n")
	fmt.Fprintf(&b, "Every command of `%s`, from the command tree the binary runs. "+
		"`%s <command> --help` prints the same.\n\n", root.Name(), root.Name())
	b.WriteString("## Exit codes\n\n")
	b.WriteString("Every command, everywhere; scripts branch on them:\n\n")
	b.WriteString("| code | meaning |\n|---|---|\n")
	fmt.Fprintf(&b, "| %d | success |\n", cli.ExitOK)
	fmt.Fprintf(&b, "| %d | runtime failure (what was looked at, and what to do, is on stderr) |\n", cli.ExitFailure)
	fmt.Fprintf(&b, "| %d | invalid input or usage: a bad flag or argument, an invalid config (each problem with its JSON path), a refused prefix |\n\n", cli.ExitInvalid)
	b.WriteString("A command that says more (which failures are 1, which refusals are 2) says it in its description below.\n\n")
	b.WriteString("## Commands\n\n")
	writeIndex(&b, root)
	var all []*cobra.Command
	walk(root, func(c *cobra.Command) { all = append(all, c) })
	for _, c := range all {
		writeCommand(&b, c, notes[commandKey(c)])
	}
	return b.String(), nil
}

// walk visits c and then every visible command under it, depth first, in
// the order the tree holds them.
func walk(c *cobra.Command, visit func(*cobra.Command)) {
	if c.Hidden {
		return
	}
	visit(c)
	for _, sub := range c.Commands() {
		walk(sub, visit)
	}
}

// writeIndex lists every command under root: by the root's command groups,
// as --help shows them, when it has groups; else in the tree's order.
func writeIndex(b *strings.Builder, root *cobra.Command) {
	item := func(top *cobra.Command) {
		walk(top, func(c *cobra.Command) {
			fmt.Fprintf(b, "- [`%s`](#%s)%s\n", c.CommandPath(), slug(c.CommandPath()), shortSuffix(c))
		})
	}
	groups := root.Groups()
	if len(groups) == 0 {
		for _, c := range root.Commands() {
			item(c)
		}
		b.WriteString("\n")
		return
	}
	grouped := map[string]bool{}
	for _, g := range groups {
		grouped[g.ID] = true
	}
	for _, g := range groups {
		fmt.Fprintf(b, "%s\n\n", strings.TrimSuffix(strings.TrimSpace(g.Title), ":"))
		for _, c := range root.Commands() {
			if c.GroupID == g.ID {
				item(c)
			}
		}
		b.WriteString("\n")
	}
	var rest []*cobra.Command
	for _, c := range root.Commands() {
		if !grouped[c.GroupID] && !c.Hidden {
			rest = append(rest, c)
		}
	}
	if len(rest) > 0 {
		b.WriteString("Other commands\n\n")
		for _, c := range rest {
			item(c)
		}
		b.WriteString("\n")
	}
}

func shortSuffix(c *cobra.Command) string {
	if c.Short == "" {
		return ""
	}
	return ": " + c.Short
}

// commandKey is c's path without the binary's name, as the notes name it.
func commandKey(c *cobra.Command) string {
	_, k, _ := strings.Cut(c.CommandPath(), " ")
	return k
}

// commandPaths are the keys of every visible command.
func commandPaths() map[string]bool {
	out := map[string]bool{}
	walk(cli.NewRootCommand(io.Discard, io.Discard), func(c *cobra.Command) { out[commandKey(c)] = true })
	return out
}

func writeCommand(b *strings.Builder, c *cobra.Command, exitCodes string) {
	fmt.Fprintf(b, "## %s\n\n", c.CommandPath())
	if c.Short != "" {
		fmt.Fprintf(b, "%s\n\n", strings.TrimSpace(c.Short))
	}
	fmt.Fprintf(b, "```text\n%s\n```\n\n", strings.TrimSpace(c.UseLine()))
	if exitCodes != "" {
		fmt.Fprintf(b, "Exit codes: %s.\n\n", exitCodes)
	}
	if len(c.Aliases) > 0 {
		fmt.Fprintf(b, "Aliases: `%s`.\n\n", strings.Join(c.Aliases, "`, `"))
	}
	if long := strings.TrimSpace(c.Long); long != "" {
		fmt.Fprintf(b, "```text\n%s\n```\n\n", long)
	}
	if subs := visibleSubcommands(c); len(subs) > 0 {
		b.WriteString("Subcommands: ")
		for i, s := range subs {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "[`%s`](#%s)", s.Name(), slug(s.CommandPath()))
		}
		b.WriteString(".\n\n")
	}
	writeFlags(b, "Flags", c.LocalNonPersistentFlags())
	writeFlags(b, "Flags for this command and those under it", c.PersistentFlags())
}

func visibleSubcommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if !s.Hidden {
			out = append(out, s)
		}
	}
	return out
}

func writeFlags(b *strings.Builder, title string, fs *pflag.FlagSet) {
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := ""
		switch {
		case strings.Contains(f.Name, "arch") && f.DefValue == runtime.GOARCH:
			// The machine that builds the binary chooses it; the page
			// must not depend on where it was generated.
			def = "this machine's (`GOARCH`)"
		case f.DefValue != "" && f.DefValue != "[]" && !(f.Value.Type() == "bool" && f.DefValue == "false"):
			def = "`" + f.DefValue + "`"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", name, f.Value.Type(), def, cell(f.Usage)))
	})
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n\n| flag | type | default | meaning |\n|---|---|---|---|\n%s\n\n", title, strings.Join(rows, "\n"))
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	return strings.ReplaceAll(s, "|", "\\|")
}

// slug is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

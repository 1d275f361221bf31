package network

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// iptables-legacy: a worker image whose iptables is the legacy variant
// writes the node's chains into the kernel's x_tables, which nft does not
// show. The host reads and changes them with its own iptables-legacy
// tools (iptables-legacy-save, iptables-legacy, and the ip6tables ones)
// when it has them; on a host without them these rules stay, as they
// did before. The rules are judged as the nft ones are: owned-named
// chains not in start's record, and the rules that jump to them.

// legacyFamily is one address family's iptables-legacy tools.
type legacyFamily struct{ name, save, cmd string }

var legacyFamilies = []legacyFamily{
	{"iptables", "iptables-legacy-save", "iptables-legacy"},
	{"ip6tables", "ip6tables-legacy-save", "ip6tables-legacy"},
}

// legacyTable is one table of iptables-save's output.
type legacyTable struct {
	name   string
	chains []string
	// rules are each chain's rules in order, by their jump target ("" for
	// none).
	rules map[string][]string
	// foreign are the chains a rule commented by a CNI plugin for another
	// network than the node's jumps to.
	foreign map[string]bool
}

// parseLegacySave reads iptables-save's output.
func parseLegacySave(out string) []legacyTable {
	var tables []legacyTable
	var cur *legacyTable
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			tables = append(tables, legacyTable{name: line[1:], rules: map[string][]string{}, foreign: map[string]bool{}})
			cur = &tables[len(tables)-1]
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			tok := shellFields(line)
			if len(tok) > 1 {
				target := jumpTarget(tok)
				cur.rules[tok[1]] = append(cur.rules[tok[1]], target)
				if target != "" && foreignCNIComment(optionValue(tok, "--comment")) {
					cur.foreign[target] = true
				}
			}
		}
	}
	return tables
}

// shellFields splits an iptables-save rule line into its words, as
// iptables-restore does: double quotes group, a backslash escapes.
func shellFields(line string) []string {
	var out []string
	var b strings.Builder
	in, quoted, esc := false, false, false
	for _, r := range line {
		switch {
		case esc:
			b.WriteRune(r)
			esc = false
		case r == '\\':
			esc, in = true, true
		case r == '"':
			quoted, in = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// optionValue is the word after opt in a rule's words ("" for none).
func optionValue(tok []string, opt string) string {
	if i := slices.Index(tok, opt); i >= 0 && i+1 < len(tok) {
		return tok[i+1]
	}
	return ""
}

// jumpTarget is the chain a rule's words jump or go to ("" for none).
func jumpTarget(tok []string) string {
	for i := 0; i+1 < len(tok); i++ {
		switch tok[i] {
		case "-j", "--jump", "-g", "--goto":
			return tok[i+1]
		}
	}
	return ""
}

// legacyChains lists iptables-legacy's chains as "family table chain";
// none for a family whose tools the host does not have.
func (c Cleaner) legacyChains(ctx context.Context) ([]string, error) {
	out := []string{}
	for _, f := range legacyFamilies {
		tables, err := c.legacySave(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, t := range tables {
			for _, ch := range t.chains {
				out = append(out, f.name+" "+t.name+" "+ch)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func (c Cleaner) legacySave(ctx context.Context, f legacyFamily) ([]legacyTable, error) {
	if !c.hasCmd(f.save) {
		return nil, nil
	}
	out, err := c.run(ctx, f.save)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.save, err)
	}
	return parseLegacySave(string(out)), nil
}

// removeLegacy removes the node's iptables-legacy chains and the rules
// that jump to them, family by family, table by table: the rules first
// (by number, last first, so the numbers before stay), then the chains
// emptied, then deleted.
func (c Cleaner) removeLegacy(ctx context.Context, n nodes) (bool, error) {
	changed := false
	for _, f := range legacyFamilies {
		tables, err := c.legacySave(ctx, f)
		if err != nil {
			return changed, err
		}
		for _, t := range tables {
			cmds := legacyCommands(f, t, n)
			for _, cmd := range cmds {
				if _, err := c.run(ctx, f.cmd, cmd...); err != nil {
					return true, fmt.Errorf("%s %s: %w", f.cmd, strings.Join(cmd, " "), err)
				}
			}
			changed = changed || len(cmds) > 0
		}
	}
	return changed, nil
}

// legacyCommands are the iptables-legacy commands that remove the node's
// part of table t.
func legacyCommands(f legacyFamily, t legacyTable, n nodes) [][]string {
	gone := map[string]bool{}
	var chains []string
	for _, ch := range t.chains {
		if !t.foreign[ch] && n.chain(f.name+" "+t.name+" "+ch, ch) {
			gone[ch] = true
			chains = append(chains, ch)
		}
	}
	var cmds [][]string
	for _, ch := range t.chains {
		if gone[ch] {
			continue
		}
		rules := t.rules[ch]
		for i := len(rules) - 1; i >= 0; i-- {
			if gone[rules[i]] {
				cmds = append(cmds, []string{"-w", "5", "-t", t.name, "-D", ch, fmt.Sprint(i + 1)})
			}
		}
	}
	for _, ch := range chains {
		cmds = append(cmds, []string{"-w", "5", "-t", t.name, "-F", ch})
	}
	for _, ch := range chains {
		cmds = append(cmds, []string{"-w", "5", "-t", t.name, "-X", ch})
	}
	return cmds
}

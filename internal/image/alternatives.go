package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Packages register alternatives (awk, iptables, which, pager) from
// their postinst with update-alternatives --install. The builder reads
// those calls from the scripts, picks each name's highest priority
// target that the image holds (or the one the spec names), makes the
// links and writes update-alternatives' records, so the machine has
// /usr/sbin/iptables and update-alternatives works inside it. A call
// whose arguments are shell variables is skipped: the builder does not
// run shell.

type altSlave struct{ link, name, path string }

type altInstall struct {
	pkg                string
	link, name, target string
	priority           int
	slaves             []altSlave
}

// parseAlternatives returns the update-alternatives --install calls in a
// maintainer script.
func parseAlternatives(pkg, script string) []altInstall {
	var out []altInstall
	joined := strings.ReplaceAll(script, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		f := strings.Fields(line)
		for i := 0; i < len(f); i++ {
			if f[i] != "update-alternatives" {
				continue
			}
			if a, ok := parseInstall(pkg, f[i+1:]); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

func parseInstall(pkg string, args []string) (altInstall, bool) {
	var a altInstall
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--install":
			if i+4 >= len(args) {
				return a, false
			}
			p, err := strconv.Atoi(unquote(args[i+4]))
			if err != nil {
				return a, false
			}
			a = altInstall{pkg: pkg, link: unquote(args[i+1]), name: unquote(args[i+2]), target: unquote(args[i+3]), priority: p}
			i += 4
		case "--slave":
			if i+3 >= len(args) || a.name == "" {
				return a, false
			}
			a.slaves = append(a.slaves, altSlave{link: unquote(args[i+1]), name: unquote(args[i+2]), path: unquote(args[i+3])})
			i += 3
		case "||", "&&", ";", "|":
			i = len(args)
		default:
			if a.name == "" && strings.HasPrefix(args[i], "--") {
				continue // --quiet and other options before --install
			}
			if a.name != "" {
				i = len(args)
			}
		}
	}
	if a.name == "" {
		return a, false
	}
	for _, s := range append([]string{a.link, a.name, a.target}, slaveFields(a.slaves)...) {
		if strings.ContainsAny(s, "$`\"'") || s == "" {
			return a, false
		}
	}
	return a, strings.HasPrefix(a.link, "/") && strings.HasPrefix(a.target, "/")
}

func slaveFields(ss []altSlave) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.link, s.name, s.path)
	}
	return out
}

func unquote(s string) string { return strings.TrimSuffix(strings.Trim(s, `"'`), ";") }

// alternatives applies the calls found in every package's postinst.
func (b *builder) alternatives() error {
	byName := map[string][]altInstall{}
	for _, u := range b.debs {
		for _, a := range parseAlternatives(u.pkg.Name, string(u.control.Files["postinst"])) {
			if _, n, _ := b.tree.Resolve(a.target); n == nil {
				continue // a target the image does not hold (excluded docs)
			}
			byName[a.name] = append(byName[a.name], a)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		cands := byName[name]
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].priority > cands[j].priority })
		pick := cands[0]
		if want, ok := b.spec.Alternatives[name]; ok {
			found := false
			for _, c := range cands {
				if c.target == want {
					pick, found = c, true
				}
			}
			if !found {
				return fmt.Errorf("alternatives.%s: %s is not one of the targets the packages register", name, want)
			}
		}
		if err := b.linkAlternative(pick); err != nil {
			return err
		}
		b.writeAltRecord(name, pick, cands)
	}
	for name := range b.spec.Alternatives {
		if _, ok := byName[name]; !ok {
			return fmt.Errorf("alternatives.%s: no package in the image registers it", name)
		}
	}
	return nil
}

// linkAlternative makes link -> /etc/alternatives/name -> target, for the
// master and each slave whose target exists; a path a package ships as a
// real file is left alone, as update-alternatives leaves it.
func (b *builder) linkAlternative(a altInstall) error {
	one := func(link, name, target string) {
		if _, n, _ := b.tree.Resolve(target); n == nil {
			return
		}
		p, err := b.tree.ResolveParent(link)
		if err != nil {
			return
		}
		if n := b.tree.Get(p); n != nil && n.Type != tar.TypeSymlink {
			b.note(fmt.Sprintf("alternatives: %s is a file of %s; not replaced by a link to %s", link, n.Package, target))
			return
		}
		b.symlink("/etc/alternatives/"+name, target)
		b.symlink(p, "/etc/alternatives/"+name)
	}
	one(a.link, a.name, a.target)
	for _, s := range a.slaves {
		one(s.link, s.name, s.path)
	}
	return nil
}

// writeAltRecord writes /var/lib/dpkg/alternatives/<name> in
// update-alternatives' format: mode, master link, slaves, then every
// choice with its priority and slave targets.
func (b *builder) writeAltRecord(name string, pick altInstall, cands []altInstall) {
	var w bytes.Buffer
	mode := "auto"
	if _, ok := b.spec.Alternatives[name]; ok {
		mode = "manual"
	}
	fmt.Fprintf(&w, "%s\n%s\n", mode, pick.link)
	var slaveNames []string
	seen := map[string]string{}
	for _, c := range cands {
		for _, s := range c.slaves {
			if _, ok := seen[s.name]; !ok {
				seen[s.name] = s.link
				slaveNames = append(slaveNames, s.name)
			}
		}
	}
	for _, s := range slaveNames {
		fmt.Fprintf(&w, "%s\n%s\n", s, seen[s])
	}
	w.WriteString("\n")
	sorted := append([]altInstall{}, cands...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].target < sorted[j].target })
	for _, c := range sorted {
		fmt.Fprintf(&w, "%s\n%d\n", c.target, c.priority)
		for _, s := range slaveNames {
			p := ""
			for _, cs := range c.slaves {
				if cs.name == s {
					p = cs.path
				}
			}
			w.WriteString(p + "\n")
		}
	}
	w.WriteString("\n")
	b.file("/var/lib/dpkg/alternatives/"+name, w.Bytes(), 0o644, 0)
}

package deb

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Package is one binary package as a Packages index lists it.
type Package struct {
	Name         string
	Version      string
	Architecture string
	MultiArch    string
	Essential    bool
	Priority     string
	Source       string // source package name, "" when the same as Name
	Filename     string // pool path, relative to the mirror root
	SHA256       string
	Size         int64
	Depends      []Alternatives
	PreDepends   []Alternatives
	Provides     []Provided
	Conflicts    []Alternatives
	// Component is the archive component whose index listed it.
	Component string
	// Stanza is the index paragraph as read.
	Stanza *Paragraph

	// rawRelations are Pre-Depends, Depends and Conflicts as written,
	// parsed by Relations when the resolver first looks at the package.
	rawRelations [3]string
	parsed       bool
}

// Relations parses the package's Pre-Depends, Depends and Conflicts into
// its fields, once.
func (p *Package) Relations() error {
	if p.parsed {
		return nil
	}
	for i, dst := range []*[]Alternatives{&p.PreDepends, &p.Depends, &p.Conflicts} {
		rels, err := ParseRelations(p.rawRelations[i])
		if err != nil {
			return fmt.Errorf("package %s: %s: %w", p.ID(), [3]string{"Pre-Depends", "Depends", "Conflicts"}[i], err)
		}
		*dst = rels
	}
	p.parsed = true
	return nil
}

// ID is name=version, how the package is named in errors and the lock.
func (p *Package) ID() string { return p.Name + "=" + p.Version }

// SourceName is the source package, falling back to the binary's name.
func (p *Package) SourceName() string {
	if p.Source != "" {
		return p.Source
	}
	return p.Name
}

// Dep is one package name with an optional version relation.
type Dep struct {
	Name string
	Rel  Relation
}

func (d Dep) String() string { return d.Name + d.Rel.String() }

// Alternatives is one clause of a relationship field: "a | b (>= 1)".
type Alternatives []Dep

func (a Alternatives) String() string {
	s := make([]string, len(a))
	for i, d := range a {
		s[i] = d.String()
	}
	return strings.Join(s, " | ")
}

// Provided is a virtual package a package provides, with an optional
// exact version ("foo (= 1.2)").
type Provided struct {
	Name    string
	Version string
}

// depRE is one package in a relationship field: name, an optional
// ":arch" qualifier, an optional (op version), an optional [arch list]
// and <build profiles> (build relations only, but legal to skip).
var depRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([a-z0-9][a-z0-9+.-]*)(:[a-z0-9-]+)?\s*(\(\s*(<<|<=|=|>=|>>|<|>)\s*([0-9A-Za-z][^)\s]*)\s*\))?\s*(\[[^\]]*\])?\s*(<[^>]*>\s*)*$`)
})

// ParseRelations parses a Depends-style field.
func ParseRelations(field string) ([]Alternatives, error) {
	field = strings.TrimSpace(field)
	if field == "" {
		return nil, nil
	}
	var out []Alternatives
	for _, clause := range strings.Split(field, ",") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			continue
		}
		var alts Alternatives
		for _, one := range strings.Split(clause, "|") {
			d, err := parseDep(one)
			if err != nil {
				return nil, err
			}
			alts = append(alts, d)
		}
		out = append(out, alts)
	}
	return out, nil
}

func parseDep(s string) (Dep, error) {
	s = strings.Join(strings.Fields(s), " ")
	m := depRE().FindStringSubmatch(s)
	if m == nil {
		return Dep{}, fmt.Errorf("%q is not a package relation", s)
	}
	d := Dep{Name: m[1]}
	if m[4] != "" {
		op := m[4]
		// "<" and ">" are obsolete spellings of "<=" and ">=".
		switch op {
		case "<":
			op = "<="
		case ">":
			op = ">="
		}
		d.Rel = Relation{Op: op, Version: m[5]}
	}
	return d, nil
}

func parseProvides(field string) ([]Provided, error) {
	rels, err := ParseRelations(field)
	if err != nil {
		return nil, err
	}
	var out []Provided
	for _, alts := range rels {
		if len(alts) != 1 || (alts[0].Rel.Op != "" && alts[0].Rel.Op != "=") {
			return nil, fmt.Errorf("Provides: %q: only name or name (= version) is allowed", alts)
		}
		out = append(out, Provided{Name: alts[0].Name, Version: alts[0].Rel.Version})
	}
	return out, nil
}

// PackageFromParagraph reads the fields the builder uses from an index
// stanza (or a .deb's control file, which has no Filename and hashes).
func PackageFromParagraph(p *Paragraph) (*Package, error) {
	pkg := &Package{
		Name:         p.Get("Package"),
		Version:      p.Get("Version"),
		Architecture: p.Get("Architecture"),
		MultiArch:    p.Get("Multi-Arch"),
		Essential:    p.Get("Essential") == "yes",
		Priority:     p.Get("Priority"),
		Filename:     p.Get("Filename"),
		SHA256:       p.Get("SHA256"),
		Stanza:       p,
	}
	if pkg.Name == "" || pkg.Version == "" {
		return nil, fmt.Errorf("stanza without Package or Version")
	}
	if _, err := ParseVersion(pkg.Version); err != nil {
		return nil, fmt.Errorf("package %s: %w", pkg.Name, err)
	}
	if src := p.Get("Source"); src != "" {
		// "Source: name (version)" when the source version differs.
		pkg.Source = strings.Fields(src)[0]
	}
	if s := p.Get("Size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("package %s: Size %q is not a size", pkg.ID(), s)
		}
		pkg.Size = n
	}
	pkg.rawRelations = [3]string{p.Get("Pre-Depends"), p.Get("Depends"), p.Get("Conflicts")}
	var err error
	if pkg.Provides, err = parseProvides(p.Get("Provides")); err != nil {
		return nil, fmt.Errorf("package %s: %w", pkg.ID(), err)
	}
	return pkg, nil
}

// indexFields are the fields of a Packages stanza the builder reads;
// the rest (descriptions, mostly) are skipped while scanning.
var indexFields = map[string]bool{
	"package": true, "version": true, "architecture": true, "multi-arch": true, "essential": true,
	"priority": true, "source": true, "filename": true, "sha256": true, "size": true,
	"depends": true, "pre-depends": true, "provides": true, "conflicts": true,
}

// ReadIndex parses a Packages index (uncompressed), keeping the packages
// for arch and "all". name is the index's URL or path, for errors. Only
// the fields the resolver needs are kept: a Debian main index is 60,000
// stanzas, most of them description text.
func ReadIndex(name, component, arch string, r io.Reader) ([]*Package, error) {
	var out []*Package
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256<<10), maxLine)
	cur := &Paragraph{values: map[string]string{}}
	last := ""
	line := 0
	flush := func() error {
		if len(cur.keys) == 0 {
			return nil
		}
		p := cur
		cur, last = &Paragraph{values: map[string]string{}}, ""
		pkg, err := PackageFromParagraph(p)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
		pkg.Stanza = nil
		if pkg.Architecture != arch && pkg.Architecture != "all" {
			return nil
		}
		if pkg.Filename == "" || !validHex(pkg.SHA256) {
			return fmt.Errorf("%s: package %s has no Filename or SHA256", name, pkg.ID())
		}
		if err := validPoolPath(pkg.Filename); err != nil {
			return fmt.Errorf("%s: package %s: Filename: %w", name, pkg.ID(), err)
		}
		pkg.Component = component
		out = append(out, pkg)
		return nil
	}
	for sc.Scan() {
		line++
		s := sc.Bytes()
		switch {
		case len(s) == 0 || len(bytes.TrimSpace(s)) == 0:
			if err := flush(); err != nil {
				return nil, err
			}
		case s[0] == ' ' || s[0] == '\t':
			if last != "" {
				cur.values[last] += "\n" + string(s)
			}
		default:
			k, v, ok := bytes.Cut(s, []byte(":"))
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q is not a field", name, line, truncate(string(s)))
			}
			lk := strings.ToLower(string(k))
			if !indexFields[lk] {
				last = ""
				continue
			}
			cur.keys = append(cur.keys, string(k))
			cur.values[lk] = string(bytes.TrimLeft(v, " \t"))
			last = lk
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// validPoolPath accepts the relative, clean paths a mirror serves files
// under, so that joining one to the mirror URL or the cache cannot leave
// either.
func validPoolPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsAny(p, "\x00?#") {
		return fmt.Errorf("%q is not a relative path", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%q is not a clean relative path", p)
		}
	}
	return nil
}

func validHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

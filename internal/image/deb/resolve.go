package deb

import (
	"fmt"
	"sort"
	"strings"
)

// Universe is every package the indexes of one build list, by name and
// by what they provide.
type Universe struct {
	byName    map[string][]*Package // highest version first
	providers map[string][]*Package // virtual name -> packages providing it
}

// NewUniverse indexes pkgs. When two indexes list the same name and
// version, the first wins.
func NewUniverse(pkgs []*Package) *Universe {
	u := &Universe{byName: map[string][]*Package{}, providers: map[string][]*Package{}}
	seen := map[string]bool{}
	for _, p := range pkgs {
		if seen[p.ID()] {
			continue
		}
		seen[p.ID()] = true
		u.byName[p.Name] = append(u.byName[p.Name], p)
		for _, pv := range p.Provides {
			u.providers[pv.Name] = append(u.providers[pv.Name], p)
		}
	}
	for _, ps := range u.byName {
		sort.SliceStable(ps, func(i, j int) bool { return CompareVersions(ps[i].Version, ps[j].Version) > 0 })
	}
	for _, ps := range u.providers {
		sort.SliceStable(ps, func(i, j int) bool { return providerLess(ps[i], ps[j]) })
	}
	return u
}

// Len is the number of distinct package names.
func (u *Universe) Len() int { return len(u.byName) }

// priorityRank orders providers of a virtual package the way a human
// would pick: required before important before standard before optional.
func priorityRank(p string) int {
	switch p {
	case "required":
		return 0
	case "important":
		return 1
	case "standard":
		return 2
	case "optional":
		return 3
	}
	return 4
}

func providerLess(a, b *Package) bool {
	if ra, rb := priorityRank(a.Priority), priorityRank(b.Priority); ra != rb {
		return ra < rb
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return CompareVersions(a.Version, b.Version) > 0
}

// UnsatisfiableError is a package whose dependency no package satisfies.
type UnsatisfiableError struct {
	Package string // name=version, or the spec's request
	Missing string // the dependency clause, as the index writes it
	Chain   []string
}

func (e *UnsatisfiableError) Error() string {
	s := fmt.Sprintf("package %s depends on %s, which no package in the indexes satisfies", e.Package, e.Missing)
	if len(e.Chain) > 0 {
		s += " (pulled in by " + strings.Join(e.Chain, " -> ") + ")"
	}
	return s
}

// NotFoundError is a requested package that no index lists.
type NotFoundError struct{ Request string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("package %s: not in the indexes of the suite and components the spec names", e.Request)
}

type resolver struct {
	u        *Universe
	selected map[string]*Package
	provided map[string][]*Package
	why      map[string]string // name -> the name that pulled it in ("" for a request)
	queue    []*Package
}

// Resolve returns the closed set the requests (name or name=version)
// need: every request, every Essential package when essential is set,
// and their Depends and Pre-Depends, alternatives and virtual packages
// resolved; sorted by name. The first alternative that can be satisfied
// wins, a package already chosen before any other; a virtual package is
// provided by the first of its providers by priority, then name.
func (u *Universe) Resolve(requests []string, essential bool) ([]*Package, error) {
	r := &resolver{u: u, selected: map[string]*Package{}, provided: map[string][]*Package{}, why: map[string]string{}}
	for _, req := range requests {
		name, ver, _ := strings.Cut(req, "=")
		var pick *Package
		for _, p := range u.byName[name] {
			if ver == "" || p.Version == ver {
				pick = p
				break
			}
		}
		if pick == nil {
			return nil, &NotFoundError{Request: req}
		}
		if have := r.selected[name]; have != nil && have != pick {
			return nil, fmt.Errorf("package %s is requested as both %s and %s", name, have.Version, pick.Version)
		}
		r.add(pick, "")
	}
	if essential {
		names := make([]string, 0, len(u.byName))
		for n := range u.byName {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if p := u.byName[n][0]; p.Essential && r.selected[n] == nil {
				r.add(p, "")
			}
		}
	}
	for len(r.queue) > 0 {
		p := r.queue[0]
		r.queue = r.queue[1:]
		if err := p.Relations(); err != nil {
			return nil, err
		}
		for _, clause := range append(append([]Alternatives{}, p.PreDepends...), p.Depends...) {
			if r.satisfied(clause) {
				continue
			}
			pick := r.choose(clause)
			if pick == nil {
				return nil, &UnsatisfiableError{Package: p.ID(), Missing: clause.String(), Chain: r.chain(p.Name)}
			}
			r.add(pick, p.Name)
		}
	}
	if err := r.conflicts(); err != nil {
		return nil, err
	}
	out := make([]*Package, 0, len(r.selected))
	for _, p := range r.selected {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (r *resolver) add(p *Package, by string) {
	r.selected[p.Name] = p
	r.why[p.Name] = by
	for _, pv := range p.Provides {
		r.provided[pv.Name] = append(r.provided[pv.Name], p)
	}
	r.queue = append(r.queue, p)
}

// chain is how name came to be selected, request first.
func (r *resolver) chain(name string) []string {
	var c []string
	for n := name; n != ""; n = r.why[n] {
		c = append([]string{n}, c...)
		if len(c) > 64 {
			break
		}
	}
	return c
}

func providesMatch(p *Package, d Dep) bool {
	for _, pv := range p.Provides {
		if pv.Name != d.Name {
			continue
		}
		if d.Rel.Op == "" {
			return true
		}
		if pv.Version != "" && d.Rel.Satisfied(pv.Version) {
			return true
		}
	}
	return false
}

func (r *resolver) satisfied(clause Alternatives) bool {
	for _, d := range clause {
		if p := r.selected[d.Name]; p != nil && d.Rel.Satisfied(p.Version) {
			return true
		}
		for _, p := range r.provided[d.Name] {
			if providesMatch(p, d) {
				return true
			}
		}
	}
	return false
}

// choose picks the package that satisfies clause: for each alternative in
// order, the highest version of the real package that satisfies it, else
// its first provider; a name already selected at another version cannot
// be chosen again.
func (r *resolver) choose(clause Alternatives) *Package {
	for _, d := range clause {
		for _, p := range r.u.byName[d.Name] {
			if d.Rel.Satisfied(p.Version) && r.selected[p.Name] == nil {
				return p
			}
		}
		for _, p := range r.u.providers[d.Name] {
			if providesMatch(p, d) && r.selected[p.Name] == nil {
				return p
			}
		}
	}
	return nil
}

// conflicts refuses a set in which one package conflicts with another
// (a package's conflict with what it provides itself does not count).
func (r *resolver) conflicts() error {
	names := make([]string, 0, len(r.selected))
	for n := range r.selected {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := r.selected[n]
		if err := p.Relations(); err != nil {
			return err
		}
		for _, clause := range p.Conflicts {
			for _, d := range clause {
				if q := r.selected[d.Name]; q != nil && q != p && d.Rel.Satisfied(q.Version) {
					return fmt.Errorf("package %s conflicts with %s, which the set needs too (pulled in by %s)", p.ID(), q.ID(), strings.Join(r.chain(q.Name), " -> "))
				}
				for _, q := range r.provided[d.Name] {
					if q != p && d.Rel.Op == "" {
						return fmt.Errorf("package %s conflicts with %s, which %s provides (pulled in by %s)", p.ID(), d.Name, q.ID(), strings.Join(r.chain(q.Name), " -> "))
					}
				}
			}
		}
	}
	return nil
}

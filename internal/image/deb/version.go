package deb

import (
	"fmt"
	"strings"
)

// Version is a Debian version: [epoch:]upstream[-revision]
// (deb-version(7)).
type Version struct {
	Epoch    int
	Upstream string
	Revision string
}

func (v Version) String() string {
	s := v.Upstream
	if v.Epoch != 0 {
		s = fmt.Sprintf("%d:%s", v.Epoch, s)
	}
	if v.Revision != "" {
		s += "-" + v.Revision
	}
	return s
}

// ParseVersion splits a Debian version into its parts. The revision is
// what follows the last hyphen; the epoch what precedes the first colon.
func ParseVersion(s string) (Version, error) {
	var v Version
	s = strings.TrimSpace(s)
	if s == "" {
		return v, fmt.Errorf("empty version")
	}
	if e, rest, ok := strings.Cut(s, ":"); ok {
		n := 0
		for _, c := range e {
			if c < '0' || c > '9' {
				return v, fmt.Errorf("version %q: epoch %q is not a number", s, e)
			}
			n = n*10 + int(c-'0')
			if n > 1<<30 {
				return v, fmt.Errorf("version %q: epoch too large", s)
			}
		}
		if e == "" {
			return v, fmt.Errorf("version %q: empty epoch", s)
		}
		v.Epoch, s = n, rest
	}
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		v.Upstream, v.Revision = s[:i], s[i+1:]
	} else {
		v.Upstream = s
	}
	if v.Upstream == "" || v.Upstream[0] < '0' || v.Upstream[0] > '9' {
		return v, fmt.Errorf("version %q: upstream part must start with a digit", s)
	}
	return v, nil
}

// CompareVersions orders two version strings the way dpkg does; a
// version that does not parse sorts before every one that does.
func CompareVersions(a, b string) int {
	va, ea := ParseVersion(a)
	vb, eb := ParseVersion(b)
	switch {
	case ea != nil && eb != nil:
		return strings.Compare(a, b)
	case ea != nil:
		return -1
	case eb != nil:
		return 1
	}
	return va.Compare(vb)
}

// Compare orders v and w: negative, zero or positive.
func (v Version) Compare(w Version) int {
	if v.Epoch != w.Epoch {
		if v.Epoch < w.Epoch {
			return -1
		}
		return 1
	}
	if c := compareFragment(v.Upstream, w.Upstream); c != 0 {
		return c
	}
	return compareFragment(v.Revision, w.Revision)
}

// order is the weight of one non-digit character: '~' sorts before
// everything (even the end of the string), letters before other
// characters.
func order(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return 0
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		return int(c)
	case c == '~':
		return -1
	case c != 0:
		return int(c) + 256
	}
	return 0
}

// compareFragment is dpkg's verrevcmp: alternating runs of non-digits
// (compared by order) and digits (compared numerically).
func compareFragment(a, b string) int {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		firstDiff := 0
		for (i < len(a) && !isDigit(a[i])) || (j < len(b) && !isDigit(b[j])) {
			ac, bc := 0, 0
			if i < len(a) {
				ac = order(a[i])
			}
			if j < len(b) {
				bc = order(b[j])
			}
			if ac != bc {
				return sign(ac - bc)
			}
			i++
			j++
		}
		for i < len(a) && a[i] == '0' {
			i++
		}
		for j < len(b) && b[j] == '0' {
			j++
		}
		for i < len(a) && isDigit(a[i]) && j < len(b) && isDigit(b[j]) {
			if firstDiff == 0 {
				firstDiff = int(a[i]) - int(b[j])
			}
			i++
			j++
		}
		if i < len(a) && isDigit(a[i]) {
			return 1
		}
		if j < len(b) && isDigit(b[j]) {
			return -1
		}
		if firstDiff != 0 {
			return sign(firstDiff)
		}
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// Relation is a version constraint of a dependency: <<, <=, =, >=, >>.
type Relation struct {
	Op      string
	Version string
}

// Satisfied reports whether version v meets the relation; the zero
// Relation accepts any version.
func (r Relation) Satisfied(v string) bool {
	if r.Op == "" {
		return true
	}
	c := CompareVersions(v, r.Version)
	switch r.Op {
	case "<<":
		return c < 0
	case "<=":
		return c <= 0
	case "=":
		return c == 0
	case ">=":
		return c >= 0
	case ">>":
		return c > 0
	}
	return false
}

func (r Relation) String() string {
	if r.Op == "" {
		return ""
	}
	return " (" + r.Op + " " + r.Version + ")"
}

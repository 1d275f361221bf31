// Package layout owns every agent-owned host path: where the binary, the
// upgrade slots, the recovery script and the units live, all derived from
// the declared install prefix (agent.hostPrefix). It also owns the one rule
// that says which prefixes are acceptable.
package layout

import (
	"fmt"
	"strings"
)

// MaxPrefixLen bounds the prefix so that every derived path (the longest is
// the recovery script under the lib dir) stays well inside PATH_MAX and the
// line-length limits of unit files.
const MaxPrefixLen = 200

// forbiddenRoots are API or volatile filesystems: files placed there vanish
// at reboot or are not files at all, so a prefix under them can never work.
var forbiddenRoots = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

const prefixRuleHint = "a prefix is an absolute path whose components use only letters, digits, '.', '_' and '-'"

// PrefixError explains why a prefix was rejected. Offset is the byte offset
// of the offending character, or -1 when the rejection is about the whole
// value (too long, forbidden root).
type PrefixError struct {
	Prefix string
	Offset int
	Reason string
}

func (e *PrefixError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q is not a valid prefix: %s", e.Prefix, e.Reason)
	if e.Offset >= 0 && e.Offset <= len(e.Prefix) && printable(e.Prefix) {
		fmt.Fprintf(&b, "\n    %s\n    %s^", e.Prefix, strings.Repeat(" ", e.Offset))
	}
	b.WriteString("\n" + prefixRuleHint)
	return b.String()
}

// printable reports whether the caret line can be drawn under s: only when
// every byte is a single-column printable ASCII character.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func allowedByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// ValidatePrefix is the one validation rule for agent.hostPrefix. The empty
// string is valid and selects the default layout. The accepted syntax is
// deliberately narrow because the prefix is interpolated unquoted into unit
// files and shell scripts: nothing it accepts may mean anything special to
// systemd's specifier/quoting rules or to a POSIX shell.
func ValidatePrefix(p string) error {
	if p == "" {
		return nil
	}
	if err := validateSyntax(p); err != nil {
		return err
	}
	for _, root := range forbiddenRoots {
		if under(p, root) {
			return &PrefixError{Prefix: p, Offset: -1, Reason: fmt.Sprintf("it is under %s, which is not persistent host storage", root)}
		}
	}
	return validateBind(p)
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// validateBind refuses a prefix whose lib dir, bound read-only into the
// machine for the kubelet's credential plugin (the agent binary), would
// show the machine the host's state (the identity and its secrets) or
// the machines dir (the other machine's rootfs), and a prefix inside
// either: the machines dir is where machine images live (a machine could
// write the host's agent), the state dir is what reset removes.
func validateBind(p string) error {
	lib := p + "/lib"
	instead := "; use a prefix outside /var/lib, such as " + SuggestedPrefix
	var exposed []string
	for _, d := range []struct{ dir, what string }{
		{stateDir, "the agent's state and identity, secrets included"},
		{machinesDir, "every machine's rootfs, the other machine's too"},
	} {
		switch {
		case under(p, d.dir):
			return &PrefixError{Prefix: p, Offset: -1, Reason: fmt.Sprintf("it is inside %s (%s), which is no place for the agent's binaries: the machine could reach them, or reset would remove them%s", d.dir, d.what, instead)}
		case under(d.dir, lib):
			exposed = append(exposed, fmt.Sprintf("%s (%s)", d.dir, d.what))
		}
	}
	if len(exposed) > 0 {
		return &PrefixError{Prefix: p, Offset: -1, Reason: fmt.Sprintf("its lib dir %s is bound into the machine (for the kubelet's credential plugin) and holds %s: the machine would see them%s", lib, strings.Join(exposed, " and "), instead)}
	}
	return nil
}

// validateSyntax is the character-level half of the rule, shared with
// ValidateUnitPath.
func validateSyntax(p string) error {
	bad := func(off int, format string, args ...any) error {
		return &PrefixError{Prefix: p, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	if len(p) > MaxPrefixLen {
		return bad(-1, "it is %d bytes long; at most %d are allowed", len(p), MaxPrefixLen)
	}
	if p[0] != '/' {
		return bad(0, "it is relative; it must start with '/'")
	}
	if p == "/" {
		return bad(-1, "'/' itself cannot be the prefix; name a directory such as "+SuggestedPrefix)
	}
	if p[len(p)-1] == '/' {
		return bad(len(p)-1, "trailing '/' is not allowed")
	}
	// Walk the components so every message can point at where the problem starts.
	start := 1
	for start <= len(p) {
		end := strings.IndexByte(p[start:], '/')
		if end < 0 {
			end = len(p)
		} else {
			end += start
		}
		comp := p[start:end]
		switch {
		case comp == "":
			return bad(start, "empty path component ('//') is not allowed")
		case comp == ".":
			return bad(start, "'.' component is not allowed")
		case comp == "..":
			return bad(start, "'..' component is not allowed")
		case comp[0] == '-':
			return bad(start, "component %q starts with '-'", comp)
		}
		for i := 0; i < len(comp); i++ {
			if !allowedByte(comp[i]) {
				return bad(start+i, "%s at offset %d is not allowed", describeByte(comp[i]), start+i)
			}
		}
		start = end + 1
	}
	return nil
}

func describeByte(c byte) string {
	if c >= 0x20 && c <= 0x7e {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// ValidateUnitPath checks a path that is not a prefix but is interpolated
// into units and scripts the same way (the config file path): same
// character rule, without the forbidden-root restriction, since a config
// file may live anywhere the operator keeps it.
func ValidateUnitPath(p string) error {
	if p == "" {
		return &PrefixError{Prefix: p, Offset: -1, Reason: "it is empty"}
	}
	if err := validateSyntax(p); err != nil {
		return err
	}
	return nil
}

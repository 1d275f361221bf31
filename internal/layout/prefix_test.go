package layout

import (
	"errors"
	"strings"
	"testing"
)

func TestValidatePrefixAccepts(t *testing.T) {
	for _, p := range []string{"", "/opt/aks-flex-node", "/opt/aks_flex.node-2", "/var/lib/x", "/a", "/usr/local", "/opt/" + strings.Repeat("a", MaxPrefixLen-5)} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
}

func TestValidatePrefixRejects(t *testing.T) {
	cases := []struct {
		name, prefix, reason string
		offset               int
	}{
		{"relative", "opt/aks", "it is relative; it must start with '/'", 0},
		{"root", "/", "'/' itself cannot be the prefix", -1},
		{"trailing slash", "/opt/aks/", "trailing '/' is not allowed", 8},
		{"dotdot", "/opt/../etc", "'..' component is not allowed", 5},
		{"dot", "/opt/./aks", "'.' component is not allowed", 5},
		{"empty component", "/opt//aks", "empty path component ('//') is not allowed", 5},
		{"leading dash", "/opt/-rf", "component \"-rf\" starts with '-'", 5},
		{"space", "/opt/aks flex", "' ' at offset 8 is not allowed", 8},
		{"dollar", "/opt/$HOME", "'$' at offset 5 is not allowed", 5},
		{"percent", "/opt/%n", "'%' at offset 5 is not allowed", 5},
		{"semicolon", "/opt/a;b", "';' at offset 6 is not allowed", 6},
		{"quote", "/opt/a'b", "''' at offset 6 is not allowed", 6},
		{"backslash", `/opt/a\b`, `'\' at offset 6 is not allowed`, 6},
		{"newline", "/opt/a\nb", "byte 0x0a at offset 6 is not allowed", 6},
		{"non-ascii", "/opt/é", "byte 0xc3 at offset 5 is not allowed", 5},
		{"too long", "/" + strings.Repeat("a", MaxPrefixLen), "at most 200 are allowed", -1},
		{"under run", "/run/aks", "it is under /run", -1},
		{"is tmp", "/tmp", "it is under /tmp", -1},
		{"under proc", "/proc/1", "it is under /proc", -1},
		{"under sys", "/sys/x", "it is under /sys", -1},
		{"under dev", "/dev/shm/x", "it is under /dev", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePrefix(tc.prefix)
			var pe *PrefixError
			if !errors.As(err, &pe) {
				t.Fatalf("ValidatePrefix(%q) = %v, want *PrefixError", tc.prefix, err)
			}
			if !strings.Contains(pe.Reason, tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", pe.Reason, tc.reason)
			}
			if pe.Offset != tc.offset {
				t.Errorf("offset = %d, want %d", pe.Offset, tc.offset)
			}
		})
	}
}

func TestPrefixErrorPointsAtCharacter(t *testing.T) {
	err := ValidatePrefix("/opt/aks flex")
	want := `"/opt/aks flex" is not a valid prefix: ' ' at offset 8 is not allowed
    /opt/aks flex
            ^
a prefix is an absolute path whose components use only letters, digits, '.', '_' and '-'`
	if err == nil || err.Error() != want {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
	// No caret line for unprintable input: it would not line up.
	if msg := ValidatePrefix("/opt/a\tb").Error(); strings.Contains(msg, "^") {
		t.Errorf("caret drawn under unprintable input: %q", msg)
	}
}

package layout

import (
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"
)

// shellOrSystemdSpecial holds every byte that systemd's unit parser
// (specifiers, quoting, escapes, line continuation, comments, whitespace
// splitting) or an unquoted POSIX shell word would treat specially.
const shellOrSystemdSpecial = "%$\"'\\ \t\n\r\v\f;&|<>()`*?[]{}~#=!^,\x00"

func FuzzValidatePrefix(f *testing.F) {
	for _, s := range []string{"/opt/aks-flex-node", "/opt/aks flex", "/", "", "/opt/../x", "/opt/%h", "/opt/$x", "/run/x", "/a/-b", "/opt/a\\b", "/opt/a;b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePrefix(p) != nil || p == "" {
			return
		}
		if i := strings.IndexAny(p, shellOrSystemdSpecial); i >= 0 {
			t.Fatalf("accepted prefix %q holds special byte %q at %d", p, p[i], i)
		}
		for i := 0; i < len(p); i++ {
			if p[i] < 0x21 || p[i] > 0x7e {
				t.Fatalf("accepted prefix %q holds non-printable byte 0x%02x", p, p[i])
			}
		}
		// Round trip through a real unit-file parser: what we render into
		// ExecStart= is what systemd reads back as the executable path.
		bin := p + "/bin/aks-flex-node"
		text := "[Service]\nExecStart=" + bin + " agent --config /etc/aks-flex-node/config.json\n"
		opts, err := unit.DeserializeOptions(strings.NewReader(text))
		if err != nil {
			t.Fatalf("unit with prefix %q does not parse: %v", p, err)
		}
		if len(opts) != 1 || opts[0].Name != "ExecStart" {
			t.Fatalf("unit with prefix %q parsed as %+v", p, opts)
		}
		fields := strings.Fields(opts[0].Value)
		if len(fields) == 0 || fields[0] != bin {
			t.Fatalf("ExecStart round trip: got %q, want first word %q", opts[0].Value, bin)
		}
	})
}

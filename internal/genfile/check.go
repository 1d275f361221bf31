package genfile

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/unit"
)

// unitSections checks a unit, .nspawn or drop-in file with go-systemd's
// parser (the syntax systemd reads) and that every setting is in one of the
// sections the file type has, so a setting moved under the wrong header by
// an edit fails here instead of being ignored with a warning at boot. An
// empty value is refused too: to systemd it resets a list setting, which no
// template here means, so it can only be a value the caller left unset.
func unitSections(sections ...string) func([]byte) error {
	return func(text []byte) error {
		opts, err := unit.DeserializeOptions(bytes.NewReader(text))
		if err != nil {
			return fmt.Errorf("does not parse as a unit file: %w", err)
		}
		if len(opts) == 0 {
			return fmt.Errorf("has no settings")
		}
		for _, o := range opts {
			if !slices.Contains(sections, o.Section) {
				return fmt.Errorf("has %s= in [%s]; this file type has only %s", o.Name, o.Section, strings.Join(sections, ", "))
			}
			if strings.TrimSpace(o.Value) == "" {
				return fmt.Errorf("has an empty %s= in [%s]", o.Name, o.Section)
			}
		}
		return nil
	}
}

var (
	sysctlKeyRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_]+([./][a-z0-9_-]+)+$`) })
	moduleNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })
)

// settingLines yields the lines of a sysctl.d or modules-load.d file that
// are not blank or comments ('#' and ';' in both formats).
func settingLines(text []byte, f func(n int, line string) error) error {
	s := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if err := f(n, line); err != nil {
			return err
		}
	}
	return s.Err()
}

// checkSysctl: every setting is key = value, as sysctl.d(5) reads it.
func checkSysctl(text []byte) error {
	return settingLines(text, func(n int, line string) error {
		k, v, ok := strings.Cut(line, "=")
		if k, v = strings.TrimSpace(k), strings.TrimSpace(v); !ok || !sysctlKeyRE().MatchString(k) || v == "" {
			return fmt.Errorf("line %d %q is not a sysctl key = value", n, line)
		}
		return nil
	})
}

// checkModules: one module name per line, as modules-load.d(5) reads it.
func checkModules(text []byte) error {
	return settingLines(text, func(n int, line string) error {
		if !moduleNameRE().MatchString(line) {
			return fmt.Errorf("line %d %q is not a module name", n, line)
		}
		return nil
	})
}

// checkScript: the kernel needs the #! line first; the header comes after
// it. Shell syntax is shellcheck's job, in the owners' tests.
func checkScript(text []byte) error {
	if !bytes.HasPrefix(text, []byte("#!/")) {
		return fmt.Errorf("does not start with a #! line")
	}
	return nil
}

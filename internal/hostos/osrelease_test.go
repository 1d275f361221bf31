package hostos

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseOSReleaseValues(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     map[string]string
		warnings int
	}{
		{"unquoted", "ID=ubuntu\n", map[string]string{"ID": "ubuntu"}, 0},
		{"double quoted", `NAME="Ubuntu Linux"`, map[string]string{"NAME": "Ubuntu Linux"}, 0},
		{"single quoted", `OSTREE_VERSION='40.2 "x" \n'`, map[string]string{"OSTREE_VERSION": `40.2 "x" \n`}, 0},
		{"escapes in double quotes", `A="q\" b\\ d\$ t\` + "`" + `"`, map[string]string{"A": "q\" b\\ d$ t`"}, 0},
		{"other backslash kept in double quotes", `A="a\nb\x"`, map[string]string{"A": `a\nb\x`}, 0},
		{"unquoted backslash escapes", `A=a\ b\"c`, map[string]string{"A": `a b"c`}, 0},
		{"escaped trailing space kept", `A=ab\ ` + "  ", map[string]string{"A": "ab "}, 0},
		{"empty values", "A=\nB=\"\"\nC=''\n", map[string]string{"A": "", "B": "", "C": ""}, 0},
		{"comments and blanks", "# comment\n\n   \n  # indented\nID=x\n", map[string]string{"ID": "x"}, 0},
		{"whitespace around", "  ID =  fedora  \r\n\tVERSION_ID=\"40\"  \n", map[string]string{"ID": "fedora", "VERSION_ID": "40"}, 0},
		{"comment after quoted value", `ID="x" # trailing`, map[string]string{"ID": "x"}, 0},
		{"hash inside value", `A=a#b` + "\n" + `B="c # d"`, map[string]string{"A": "a#b", "B": "c # d"}, 0},
		{"last assignment wins", "ID=a\nID=b\n", map[string]string{"ID": "b"}, 0},
		{"no trailing newline", "ID=x", map[string]string{"ID": "x"}, 0},
		{"equals in value", `A="k=v"` + "\nB=x=y", map[string]string{"A": "k=v", "B": "x=y"}, 0},
		{"unquoted inner space kept, flagged", "NAME=Foo Bar\n", map[string]string{"NAME": "Foo Bar"}, 1},
		{"no equals skipped", "garbage\nID=x\n", map[string]string{"ID": "x"}, 1},
		{"bad key skipped", "1ID=x\nFOO-BAR=y\nexport A=b\n=z\n", map[string]string{}, 4},
		{"unterminated double quote", "A=\"abc\nID=x\n", map[string]string{"ID": "x"}, 1},
		{"escaped closing quote is not closing", `A="abc\"` + "\n", map[string]string{}, 1},
		{"unterminated single quote", "A='abc\n", map[string]string{}, 1},
		{"concatenation skipped", `A="a"b` + "\n" + `B="a""b"` + "\n" + `C=a"b"`, map[string]string{}, 3},
		{"comment glued to quote skipped", `A="a"#x`, map[string]string{}, 1},
		{"continuation skipped", "A=abc\\\nB=1\n", map[string]string{"B": "1"}, 1},
		{"no-break space is content", "A=\"\u00a0x\u00a0\"\nB=y\u00a0", map[string]string{"A": "\u00a0x\u00a0", "B": "y\u00a0"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOSRelease(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(o.Fields, tc.want) {
				t.Errorf("fields = %q, want %q", o.Fields, tc.want)
			}
			if len(o.Warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", o.Warnings, tc.warnings)
			}
		})
	}
}

func TestParseOSReleaseNamedFields(t *testing.T) {
	o, err := ParseOSRelease(strings.NewReader(`ID=rocky
ID_LIKE="rhel  centos	fedora"
VARIANT_ID=server
VERSION_ID="9.4"
NAME="Rocky Linux"
PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"
SUPPORT_END="2032-05-31"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := OSRelease{
		ID: "rocky", IDLike: []string{"rhel", "centos", "fedora"}, VariantID: "server",
		VersionID: "9.4", Name: "Rocky Linux", PrettyName: "Rocky Linux 9.4 (Blue Onyx)",
	}
	got := *o
	got.Fields, got.Warnings = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if o.Fields["SUPPORT_END"] != "2032-05-31" {
		t.Errorf("unknown key not kept: %q", o.Fields)
	}
}

func TestParseOSReleaseWarningNamesLine(t *testing.T) {
	o, err := ParseOSRelease(strings.NewReader("ID=x\n\n# c\nNAME=\"broken\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Warnings) != 1 || !strings.HasPrefix(o.Warnings[0], "line 4: ") || !strings.Contains(o.Warnings[0], "NAME") {
		t.Errorf("warnings = %q, want one naming line 4 and NAME", o.Warnings)
	}
}

func TestParseOSReleaseEmpty(t *testing.T) {
	o, err := ParseOSRelease(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if o.IDLike == nil || o.Fields == nil {
		t.Errorf("IDLike and Fields must be non-nil: %+v", o)
	}
}

func TestParseOSReleaseTooLarge(t *testing.T) {
	big := strings.Repeat("A=b\n", maxOSReleaseSize/4+1)
	if _, err := ParseOSRelease(strings.NewReader(big)); err == nil {
		t.Fatal("want error for oversized input")
	}
}

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadOSRelease(t *testing.T) {
	t.Run("etc wins", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "etc/os-release", "ID=etc\n")
		writeFile(t, root, "usr/lib/os-release", "ID=usr\n")
		o, p, err := ReadOSRelease(root)
		if err != nil || o.ID != "etc" || p != filepath.Join(root, "etc/os-release") {
			t.Fatalf("got %v %q %v", o, p, err)
		}
	})
	t.Run("falls back to usr/lib", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "usr/lib/os-release", "ID=usr\n")
		o, p, err := ReadOSRelease(root)
		if err != nil || o.ID != "usr" || p != filepath.Join(root, "usr/lib/os-release") {
			t.Fatalf("got %v %q %v", o, p, err)
		}
	})
	t.Run("absolute symlink stays inside root", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "usr/lib/os-release", "ID=inside\n")
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/usr/lib/os-release", filepath.Join(root, "etc/os-release")); err != nil {
			t.Fatal(err)
		}
		o, p, err := ReadOSRelease(root)
		if err != nil || o.ID != "inside" || p != filepath.Join(root, "etc/os-release") {
			t.Fatalf("got %v %q %v", o, p, err)
		}
	})
	t.Run("dangling symlink falls back", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "usr/lib/os-release", "ID=usr\n")
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../nowhere", filepath.Join(root, "etc/os-release")); err != nil {
			t.Fatal(err)
		}
		o, _, err := ReadOSRelease(root)
		if err != nil || o.ID != "usr" {
			t.Fatalf("got %v %v", o, err)
		}
	})
	t.Run("both missing names both paths", func(t *testing.T) {
		root := t.TempDir()
		_, _, err := ReadOSRelease(root)
		if err == nil {
			t.Fatal("want error")
		}
		for _, p := range []string{filepath.Join(root, "etc/os-release"), filepath.Join(root, "usr/lib/os-release")} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name %s", err, p)
			}
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("error %v does not wrap fs.ErrNotExist", err)
		}
	})
	t.Run("unreadable etc is not papered over", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "etc/os-release"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, root, "usr/lib/os-release", "ID=usr\n")
		if _, _, err := ReadOSRelease(root); err == nil || !strings.Contains(err.Error(), "etc/os-release") {
			t.Fatalf("want error naming etc/os-release, got %v", err)
		}
	})
}

func FuzzParseOSRelease(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/os-release/*")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{
		"", "=", "A", "A=", `A="`, `A='`, `A="\"`, `A=\`, "A=b\\\n", `A="a"b`,
		`A="x\$\` + "`" + `\\\"y"`, "A= b \t", "#A=b", "A=\x00\xff", "A=\"\r\"", `A='\'`,
		"ID=x\nID=y", " A = \"b\" # c", "A=\u00a0", "\ufeffID=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		o, err := ParseOSRelease(strings.NewReader(in))
		if err != nil {
			t.Fatalf("error on small input: %v", err)
		}
		for k := range o.Fields {
			if !ValidOSReleaseKey(k) {
				t.Fatalf("invalid key %q parsed from %q", k, in)
			}
		}
		again, err := ParseOSRelease(strings.NewReader(FormatOSRelease(o.Fields)))
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Warnings) != 0 {
			t.Fatalf("re-serialised %q gave warnings %q", FormatOSRelease(o.Fields), again.Warnings)
		}
		if !reflect.DeepEqual(again.Fields, o.Fields) {
			t.Fatalf("round trip changed fields:\n first %q\n again %q", o.Fields, again.Fields)
		}
		if again.ID != o.ID || again.VersionID != o.VersionID || !reflect.DeepEqual(again.IDLike, o.IDLike) {
			t.Fatalf("round trip changed named fields")
		}
	})
}

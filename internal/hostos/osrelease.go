package hostos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// os-release(5): /etc/os-release wins; /usr/lib/os-release is the vendor
// copy that image-based systems (ACL, Flatcar) always ship, and the only one
// present on hosts whose /etc was never populated.
const (
	osReleaseEtc = "/etc/os-release"
	osReleaseUsr = "/usr/lib/os-release"
)

// maxOSReleaseSize bounds what we read: real files are under 1 KiB, and a
// parser that runs before anything else must not be made to eat a disk.
const maxOSReleaseSize = 1 << 20

// OSRelease is a parsed os-release file.
type OSRelease struct {
	ID         string
	IDLike     []string // never nil, so JSON shows [] rather than null
	VariantID  string
	VersionID  string
	Name       string
	PrettyName string

	// Fields holds every assignment in the file, including the ones copied
	// into the named fields above, so callers can read keys this package
	// does not know (SYSEXT_LEVEL, BUILD_ID, ...) and the file can be
	// re-serialised without loss.
	Fields map[string]string

	// Warnings lists lines that were skipped or read leniently, each
	// prefixed with its line number. The parser is lenient like systemd's:
	// one bad line in a vendor file must not make the host unidentifiable,
	// but what was skipped is reported rather than dropped silently.
	Warnings []string
}

// ReadOSRelease reads the os-release file of the tree at root ("" means
// "/"), trying /etc/os-release and then /usr/lib/os-release, and returns the
// path it read. Symlinks (/etc/os-release is normally one) are resolved
// inside root, so an absolute link in an image does not escape to the
// running host's file.
func ReadOSRelease(root string) (*OSRelease, string, error) {
	root = normRoot(root)
	var tried []string
	for _, p := range []string{osReleaseEtc, osReleaseUsr} {
		shown := filepath.Join(root, p)
		host, err := fsroot.Resolve(root, p)
		if err == nil {
			var o *OSRelease
			o, err = parseOSReleaseFile(host)
			if err == nil {
				return o, shown, nil
			}
		}
		// Only absence falls through; a file that exists but cannot be
		// read must not be papered over by the vendor copy, because
		// /etc/os-release is where an admin's override lives.
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, shown, fmt.Errorf("read os-release %s: %w", shown, err)
		}
		tried = append(tried, shown)
	}
	return nil, "", fmt.Errorf("read os-release: neither %s nor %s exists: %w", tried[0], tried[1], fs.ErrNotExist)
}

func parseOSReleaseFile(path string) (*OSRelease, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseOSRelease(f)
}

// ParseOSRelease parses os-release(5) content: KEY=VALUE lines where VALUE
// is unquoted, "double quoted" (with \" \\ \$ \` escapes) or 'single
// quoted'; '#' comment lines and blank lines are ignored; the last
// assignment of a key wins, as when the file is sourced by a shell. Lines
// that are not valid assignments are skipped and recorded in Warnings. The
// only errors are read errors and content larger than 1 MiB.
func ParseOSRelease(r io.Reader) (*OSRelease, error) {
	o := &OSRelease{Fields: map[string]string{}}
	br := bufio.NewReader(io.LimitReader(r, maxOSReleaseSize+1))
	var total int
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadString('\n')
		total += len(line)
		if total > maxOSReleaseSize {
			return nil, fmt.Errorf("os-release is larger than %d bytes", maxOSReleaseSize)
		}
		if line != "" {
			o.parseLine(lineNo, strings.TrimSuffix(line, "\n"))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read os-release: %w", err)
		}
	}
	o.ID = o.Fields["ID"]
	o.IDLike = strings.Fields(o.Fields["ID_LIKE"])
	if o.IDLike == nil {
		o.IDLike = []string{}
	}
	o.VariantID = o.Fields["VARIANT_ID"]
	o.VersionID = o.Fields["VERSION_ID"]
	o.Name = o.Fields["NAME"]
	o.PrettyName = o.Fields["PRETTY_NAME"]
	return o, nil
}

func (o *OSRelease) warnf(lineNo int, format string, args ...any) {
	o.Warnings = append(o.Warnings, fmt.Sprintf("line %d: ", lineNo)+fmt.Sprintf(format, args...))
}

// blanks is the whitespace trimmed around keys and unquoted values. It is
// ASCII only: a no-break space inside a value is content, not layout.
const blanks = " \t\r\v\f"

func (o *OSRelease) parseLine(lineNo int, line string) {
	// Only the left side: trailing blanks belong to the value parser, which
	// must keep an escaped one ("A=b\ ").
	s := strings.TrimLeft(line, blanks)
	if s == "" || s[0] == '#' {
		return
	}
	eq := strings.IndexByte(s, '=')
	if eq < 0 {
		o.warnf(lineNo, "skipped: no '=' in %q", clip(s))
		return
	}
	key := strings.Trim(s[:eq], blanks)
	if !ValidOSReleaseKey(key) {
		o.warnf(lineNo, "skipped: %q is not a valid variable name", clip(key))
		return
	}
	val, lax, err := parseValue(strings.TrimLeft(s[eq+1:], blanks))
	if err != nil {
		o.warnf(lineNo, "skipped %s: %v", key, err)
		return
	}
	if lax != "" {
		o.warnf(lineNo, "%s: %s", key, lax)
	}
	o.Fields[key] = val
}

// parseValue decodes one value. lax is non-empty when the value was
// accepted although os-release(5) says it should have been written
// differently.
func parseValue(s string) (val, lax string, err error) {
	if s == "" {
		return "", "", nil
	}
	var b strings.Builder
	var rest string
	switch s[0] {
	case '"':
		i := 1
		for ; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				break
			}
			if c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
				i++
				c = s[i]
			}
			b.WriteByte(c)
		}
		if i >= len(s) {
			return "", "", errors.New("unterminated double quote")
		}
		rest = s[i+1:]
	case '\'':
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			return "", "", errors.New("unterminated single quote")
		}
		b.WriteString(s[1 : 1+end])
		rest = s[end+2:]
	default:
		return parseUnquoted(s)
	}
	// os-release(5) does not support concatenating quoted strings, so any
	// text after the closing quote other than a shell comment means we do
	// not know what the author meant.
	trimmed := strings.TrimLeft(rest, blanks)
	comment := trimmed != "" && trimmed[0] == '#' && len(trimmed) < len(rest)
	if trimmed != "" && !comment {
		return "", "", fmt.Errorf("text after closing quote: %q", clip(trimmed))
	}
	return b.String(), "", nil
}

// parseUnquoted follows the shell for backslashes but, like systemd, keeps
// inner whitespace instead of treating it as a word break; that case is
// flagged because the file is then not valid shell.
func parseUnquoted(s string) (val, lax string, err error) {
	var b strings.Builder
	keep := 0 // length of b up to the last character that is not trimmable
	sawSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("line continuation is not supported")
			}
			i++
			b.WriteByte(s[i])
			keep = b.Len()
		case c == '"' || c == '\'':
			return "", "", errors.New("quote inside unquoted value")
		case strings.IndexByte(blanks, c) >= 0:
			b.WriteByte(c)
			sawSpace = true
		default:
			b.WriteByte(c)
			keep = b.Len()
		}
	}
	val = b.String()[:keep]
	if sawSpace && strings.ContainsAny(strings.TrimRight(s, blanks), blanks) {
		lax = "unquoted value contains whitespace; kept as one value"
	}
	return val, lax, nil
}

// ValidOSReleaseKey reports whether k is an environment-style variable
// name, the only kind of key os-release(5) allows.
func ValidOSReleaseKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// FormatOSRelease renders fields as os-release content that ParseOSRelease
// reads back unchanged: keys sorted, every value double-quoted and escaped.
// Keys that are not valid names are dropped, since no reader could accept
// them. Values must not contain newlines, which the format cannot express.
func FormatOSRelease(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if ValidOSReleaseKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteString(`="`)
		v := fields[k]
		for i := 0; i < len(v); i++ {
			if strings.IndexByte("\"\\$`", v[i]) >= 0 {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteString("\"\n")
	}
	return b.String()
}

func clip(s string) string {
	const max = 60
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

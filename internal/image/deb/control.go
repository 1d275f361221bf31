// Package deb owns the Debian archive as the image builder reads it: the
// deb822 control format, Debian version ordering, a repository's signed
// InRelease and its Packages indexes, fetching from a mirror with every
// file checked against the hash its signed index gives (and cached by that
// hash), dependency resolution to a closed set, and the .deb file format.
// It runs no maintainer script and needs no root: nothing here writes
// outside the cache dir it is given.
package deb

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Paragraph is one deb822 stanza: field names as written (case kept for
// output), looked up case-insensitively, in file order.
type Paragraph struct {
	keys   []string
	values map[string]string // lower-cased key -> value
}

// Get returns the value of field k ("" when absent). Continuation lines
// are kept with their newlines; the leading space of each is kept too.
func (p *Paragraph) Get(k string) string { return p.values[strings.ToLower(k)] }

// Has reports whether field k is present.
func (p *Paragraph) Has(k string) bool {
	_, ok := p.values[strings.ToLower(k)]
	return ok
}

// Keys are the field names in file order.
func (p *Paragraph) Keys() []string { return p.keys }

// Set adds or replaces field k; a new field goes after field after (""
// appends).
func (p *Paragraph) Set(k, v, after string) {
	lk := strings.ToLower(k)
	if p.values == nil {
		p.values = map[string]string{}
	}
	if _, ok := p.values[lk]; ok {
		p.values[lk] = v
		return
	}
	p.values[lk] = v
	at := len(p.keys)
	if after != "" {
		for i, key := range p.keys {
			if strings.EqualFold(key, after) {
				at = i + 1
				break
			}
		}
	}
	p.keys = append(p.keys, "")
	copy(p.keys[at+1:], p.keys[at:])
	p.keys[at] = k
}

// WriteTo writes the paragraph in deb822 form, without the blank line
// that separates paragraphs.
func (p *Paragraph) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	for _, k := range p.keys {
		v := p.values[strings.ToLower(k)]
		b.WriteString(k)
		b.WriteByte(':')
		if v != "" && !strings.HasPrefix(v, "\n") {
			b.WriteByte(' ')
		}
		b.WriteString(v)
		b.WriteByte('\n')
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// maxLine bounds one line of a control file: Packages descriptions are
// long, but a line of megabytes is not a control file.
const maxLine = 1 << 20

// ParseParagraphs reads every paragraph of a deb822 file (a Packages
// index, a Release file, a control file). name says where the bytes came
// from in errors, with the line number.
func ParseParagraphs(name string, r io.Reader, each func(*Paragraph) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var cur *Paragraph
	last := ""
	line := 0
	flush := func() error {
		if cur == nil {
			return nil
		}
		p := cur
		cur, last = nil, ""
		return each(p)
	}
	for sc.Scan() {
		line++
		s := sc.Text()
		switch {
		case strings.TrimSpace(s) == "":
			if err := flush(); err != nil {
				return err
			}
		case strings.HasPrefix(s, "#") && cur == nil:
			// A comment line outside a paragraph (deb822(5)).
		case s[0] == ' ' || s[0] == '\t':
			if cur == nil || last == "" {
				return fmt.Errorf("%s:%d: continuation line outside a field", name, line)
			}
			cur.values[last] += "\n" + s
		default:
			k, v, ok := strings.Cut(s, ":")
			if !ok || k == "" || strings.ContainsAny(k, " \t") {
				return fmt.Errorf("%s:%d: %q is not a field", name, line, truncate(s))
			}
			if cur == nil {
				cur = &Paragraph{values: map[string]string{}}
			}
			lk := strings.ToLower(k)
			if _, dup := cur.values[lk]; dup {
				return fmt.Errorf("%s:%d: field %s appears twice in one paragraph", name, line, k)
			}
			cur.keys = append(cur.keys, k)
			cur.values[lk] = strings.TrimLeft(v, " \t")
			last = lk
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	return flush()
}

// ParseOne reads a file that holds exactly one paragraph (a control file).
func ParseOne(name string, data []byte) (*Paragraph, error) {
	var out *Paragraph
	err := ParseParagraphs(name, bytes.NewReader(data), func(p *Paragraph) error {
		if out != nil {
			return fmt.Errorf("%s: more than one paragraph", name)
		}
		out = p
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("%s: no paragraph", name)
	}
	return out, err
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

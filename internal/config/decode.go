package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// Strict decoding is done in two passes. encoding/json alone is not strict
// enough: it matches keys case-insensitively (so "hostprefix" would silently
// fill HostPrefix) and its unknown-field error names neither the JSON path nor
// a position. The first pass reads the document into a tree that remembers
// where each value started; the second walks that tree against the Go types
// and reports every unknown key, duplicate key and wrong type with its path
// and line:column. Only a document that passes is handed to encoding/json.

// Limits of a config document. A real config is a few kilobytes (the CA
// is its largest value) and a few levels deep; these are far above that and
// far below what hurts. The tree parse recurses once per level, so without
// a depth limit a few megabytes of '[' overflowed the Go stack and killed
// the process instead of being refused.
const (
	MaxDocumentBytes = 1 << 20
	MaxDepth         = 32
)

type jsonKind int

const (
	kindObject jsonKind = iota
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k jsonKind) String() string {
	return [...]string{"an object", "an array", "a string", "a number", "a boolean", "null"}[k]
}

type jsonNode struct {
	kind   jsonKind
	offset int64 // byte offset where the value starts
	keys   []string
	keyOff []int64
	fields map[string]*jsonNode
	elems  []*jsonNode
	num    json.Number
	str    string
	b      bool
}

// DecodeError is a problem with the document itself (not its values).
type DecodeError struct {
	Path   string // JSON path, "" for the document
	Line   int
	Column int
	Msg    string
}

func (e *DecodeError) Error() string {
	switch {
	case e.Path != "" && e.Line > 0:
		return fmt.Sprintf("%s: %s (line %d, column %d)", e.Path, e.Msg, e.Line, e.Column)
	case e.Path != "":
		return e.Path + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
	}
	return e.Msg
}

// DecodeErrors collects every document problem found in one pass.
type DecodeErrors []*DecodeError

func (es DecodeErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

type positioner struct{ data []byte }

func (p positioner) lineCol(off int64) (int, int) {
	if off < 0 {
		off = 0
	}
	if off > int64(len(p.data)) {
		off = int64(len(p.data))
	}
	before := p.data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// Decode strictly decodes a configuration document into a Config (without
// defaults). All structural problems are returned together as DecodeErrors.
func Decode(data []byte) (*Config, error) {
	pos := positioner{data}
	if len(data) > MaxDocumentBytes {
		return nil, DecodeErrors{sizeError(int64(len(data)))}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, DecodeErrors{{Msg: "the file is empty; it must hold a JSON object"}}
	}
	root, err := parseTree(data)
	if err != nil {
		return nil, syntaxError(pos, data, err)
	}
	st := &decodeState{pos: pos}
	checkNode(st, root, reflect.TypeOf(Config{}), "")
	if len(st.errs) > 0 {
		return nil, st.errs
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		// The tree walk accepts only what encoding/json can decode; reaching
		// here means the two disagree, which is a bug worth surfacing as is.
		return nil, DecodeErrors{{Msg: err.Error()}}
	}
	if err := st.applyAliases(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeState is what one strict pass collects: the problems, and the
// upstream legacy keys it met (applied once the document has decoded).
type decodeState struct {
	pos     positioner
	errs    DecodeErrors
	aliases []aliasUse
}

func (st *decodeState) fail(off int64, path, msg string) {
	line, col := st.pos.lineCol(off)
	st.errs = append(st.errs, &DecodeError{Path: path, Line: line, Column: col, Msg: msg})
}

// sizeError refuses a document of size bytes, naming the limit.
func sizeError(size int64) *DecodeError {
	return &DecodeError{Msg: fmt.Sprintf("the file is %d bytes; a config document is at most %d bytes (1 MiB)", size, MaxDocumentBytes)}
}

func syntaxError(pos positioner, data []byte, err error) error {
	var te *treeError
	if errors.As(err, &te) && te.limit {
		line, col := pos.lineCol(te.off)
		return DecodeErrors{{Path: te.path, Line: line, Column: col, Msg: te.msg}}
	}
	// The streaming decoder reports offsets inconsistently (sometimes at,
	// sometimes after the bad byte); the whole-document scanner always
	// counts the offending byte, so ask it for the position.
	var probe any
	if uerr := json.Unmarshal(data, &probe); uerr != nil {
		var use *json.SyntaxError
		if errors.As(uerr, &use) {
			err = use
		}
	}
	var se *json.SyntaxError
	off := int64(len(data))
	msg, path := err.Error(), ""
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, including the offending one.
		off = max(se.Offset-1, 0)
		msg = "not valid JSON: " + se.Error()
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		msg = "not valid JSON: unexpected end of file"
	default:
		if errors.As(err, &te) {
			off, msg, path = te.off, te.msg, te.path
		} else {
			msg = "not valid JSON: " + msg
		}
	}
	line, col := pos.lineCol(off)
	return DecodeErrors{{Path: path, Line: line, Column: col, Msg: msg}}
}

type treeError struct {
	off  int64
	path string // JSON path of the value, "" for the document
	msg  string
	// limit marks a document refused for its shape, not its syntax: the
	// message stands as it is.
	limit bool
}

func (e *treeError) Error() string { return e.msg }

func parseTree(data []byte) (*jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec, data, 1, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &treeError{off: dec.InputOffset(), msg: "not valid JSON: unexpected data after the top-level value"}
	}
	return n, nil
}

// valueStart finds where the value read by the last Token call began: the
// decoder reports the offset after it, so skip back over it is impractical;
// instead skip forward from the previous offset over whitespace, ':' and ','.
func valueStart(data []byte, prev int64) int64 {
	i := prev
	for i < int64(len(data)) {
		switch data[i] {
		case ' ', '\t', '\r', '\n', ':', ',':
			i++
			continue
		}
		break
	}
	return i
}

// parseValue reads the value at depth (the document is depth 1) and
// JSON path.
func parseValue(dec *json.Decoder, data []byte, depth int, path string) (*jsonNode, error) {
	prev := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &jsonNode{offset: valueStart(data, prev)}
	switch t := tok.(type) {
	case json.Delim:
		if depth > MaxDepth {
			return nil, &treeError{off: n.offset, path: path, limit: true,
				msg: fmt.Sprintf("objects and lists nested more than %d deep; a config document is at most %d levels deep", MaxDepth, MaxDepth)}
		}
		switch t {
		case '{':
			n.kind = kindObject
			n.fields = map[string]*jsonNode{}
			for dec.More() {
				kprev := dec.InputOffset()
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key := kt.(string)
				koff := valueStart(data, kprev)
				child, err := parseValue(dec, data, depth+1, joinPath(path, key))
				if err != nil {
					return nil, err
				}
				if _, dup := n.fields[key]; dup {
					return nil, &treeError{off: koff, path: joinPath(path, key), msg: fmt.Sprintf("duplicate key %q", key)}
				}
				n.keys = append(n.keys, key)
				n.keyOff = append(n.keyOff, koff)
				n.fields[key] = child
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
		case '[':
			n.kind = kindArray
			for dec.More() {
				child, err := parseValue(dec, data, depth+1, fmt.Sprintf("%s[%d]", path, len(n.elems)))
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
		}
	case string:
		n.kind = kindString
		n.str = t
	case json.Number:
		n.kind = kindNumber
		n.num = t
	case bool:
		n.kind = kindBool
		n.b = t
	case nil:
		n.kind = kindNull
	}
	return n, nil
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// jsonFields maps exact JSON names to field types for a struct type.
func jsonFields(t reflect.Type) (map[string]reflect.Type, []string) {
	fields := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	return fields, names
}

func checkNode(st *decodeState, n *jsonNode, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		if n.kind == kindNull {
			return
		}
		t = t.Elem()
	}
	fail := st.fail
	want := func(k jsonKind, what string) bool {
		if n.kind != k {
			fail(n.offset, path, fmt.Sprintf("must be %s, found %s%s", what, n.kind, upstreamTypeHint(path, n.kind)))
			return false
		}
		return true
	}
	displayPath := path
	if displayPath == "" {
		displayPath = "(document)"
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.kind != kindObject {
			if path == "" {
				fail(n.offset, "", fmt.Sprintf("the document must be a JSON object, found %s", n.kind))
			} else {
				want(kindObject, "an object")
			}
			return
		}
		fields, names := jsonFields(t)
		for i, key := range n.keys {
			ft, ok := fields[key]
			if !ok && st.upstreamKey(n.fields[key], n.keyOff[i], joinPath(path, key)) {
				continue
			}
			if !ok {
				msg := "unknown key"
				if s := suggest(key, names); s != "" {
					msg += fmt.Sprintf("; did you mean %s?", joinPath(path, s))
				} else {
					sorted := append([]string(nil), names...)
					sort.Strings(sorted)
					msg += fmt.Sprintf(" (known keys here: %s)", strings.Join(sorted, ", "))
				}
				fail(n.keyOff[i], joinPath(path, key), msg)
				continue
			}
			checkNode(st, n.fields[key], ft, joinPath(path, key))
		}
	case reflect.Map:
		if !want(kindObject, "an object of "+describeType(t.Elem())) {
			return
		}
		for _, key := range n.keys {
			checkNode(st, n.fields[key], t.Elem(), joinPath(path, key))
		}
	case reflect.Slice:
		if n.kind == kindNull {
			return
		}
		if !want(kindArray, "a list of "+describeType(t.Elem())) {
			return
		}
		for i, e := range n.elems {
			checkNode(st, e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.String:
		want(kindString, "a string")
	case reflect.Bool:
		want(kindBool, "true or false")
	case reflect.Int, reflect.Int64, reflect.Int32:
		if want(kindNumber, "an integer") {
			if _, err := n.num.Int64(); err != nil {
				fail(n.offset, path, fmt.Sprintf("must be an integer, found %s", n.num))
			}
		}
	default:
		fail(n.offset, displayPath, "unsupported type in schema: "+t.String())
	}
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "strings"
	case reflect.Int:
		return "integers"
	case reflect.Bool:
		return "booleans"
	}
	return "values"
}

// suggest returns the known key closest to key: a case-insensitive match
// first (the typo that matters most, hostprefix for hostPrefix), then the
// nearest by edit distance if it is close enough to be a plausible typo.
func suggest(key string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
	}
	best, bestD := "", 3
	lk := strings.ToLower(key)
	for _, k := range known {
		if d := editDistance(lk, strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

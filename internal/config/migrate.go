package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
)

// Migration is what Migrate made of an upstream config.
type Migration struct {
	// Output is the rewritten document; the input itself, byte for byte,
	// when nothing changed.
	Output []byte
	// Changes says what was rewritten, one line each, in file order.
	Changes []string
	// Refused are the upstream keys kept in Output that aks-flex-node
	// refuses: they have no equivalent here, so removing them is the
	// user's decision.
	Refused []FieldError
	// Problems are what else keeps Output from loading (validation, and
	// keys neither schema knows), one line each.
	Problems []string
	// Secret says Output holds a credential (it must be written 0600).
	Secret bool

	input []byte
}

// Changed says Output differs from the input.
func (m *Migration) Changed() bool { return len(m.Changes) > 0 }

// Valid says Output loads as it is.
func (m *Migration) Valid() bool { return len(m.Refused) == 0 && len(m.Problems) == 0 }

// MigrateOptions are `config migrate`'s choices.
type MigrateOptions struct {
	// HostPrefix, when set, becomes agent.hostPrefix; upstream has no
	// such key, so it is never guessed.
	HostPrefix string
}

// Migrate rewrites an upstream config into this product's schema:
// legacy aliases move to their keys, upstream's cloud names become ours,
// keys that only describe what aks-flex-node does anyway are removed, and
// the rest of upstream's keys are listed as refused. Output is then
// validated. Only a document that does not parse is an error.
func Migrate(data []byte, opts MigrateOptions) (*Migration, error) {
	if len(data) > MaxDocumentBytes {
		return nil, DecodeErrors{sizeError(int64(len(data)))}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, DecodeErrors{{Msg: "the file is empty; it must hold a JSON object"}}
	}
	root, err := parseTree(data)
	if err != nil {
		return nil, syntaxError(positioner{data}, data, err)
	}
	if root.kind != kindObject {
		return nil, DecodeErrors{{Msg: fmt.Sprintf("the document must be a JSON object, found %s", root.kind)}}
	}
	mg := &migrator{root: root, pos: positioner{data}, m: &Migration{input: data}}
	mg.walk(root, "")
	mg.aliases()
	if opts.HostPrefix != "" {
		mg.setString("agent.hostPrefix", opts.HostPrefix, fmt.Sprintf("set agent.hostPrefix to %q (--host-prefix)", opts.HostPrefix))
	}
	m := mg.m
	m.Output = data
	if m.Changed() {
		var b bytes.Buffer
		writeNode(&b, root, "")
		b.WriteByte('\n')
		m.Output = b.Bytes()
	}
	m.Secret = holdsSecret(root)
	m.Problems = problems(m.Output, m.Refused)
	return m, nil
}

// problems loads the output without its refused keys (which Refused
// already lists), so that everything else wrong shows at once.
func problems(out []byte, refused []FieldError) []string {
	if len(refused) > 0 {
		root, err := parseTree(out)
		if err != nil {
			return []string{err.Error()}
		}
		for _, r := range refused {
			removePath(root, r.Path)
		}
		var b bytes.Buffer
		writeNode(&b, root, "")
		out = b.Bytes()
	}
	_, err := Parse("", out)
	if err == nil {
		return nil
	}
	var lines []string
	var de DecodeErrors
	var ve ValidationErrors
	switch {
	case errors.As(err, &de):
		for _, e := range de {
			if len(refused) > 0 {
				// Positions in the stripped copy are not the file's.
				e = &DecodeError{Path: e.Path, Msg: e.Msg}
			}
			lines = append(lines, e.Error())
		}
	case errors.As(err, &ve):
		for _, e := range ve {
			lines = append(lines, e.Error())
		}
	default:
		lines = append(lines, err.Error())
	}
	return lines
}

type migrator struct {
	root    *jsonNode
	pos     positioner
	m       *Migration
	pending []pendingAlias
}

type pendingAlias struct {
	key  *UpstreamKey
	path string
	val  *jsonNode
	off  int64
}

func (mg *migrator) change(format string, args ...any) {
	mg.m.Changes = append(mg.m.Changes, fmt.Sprintf(format, args...))
}

func (mg *migrator) refuse(path string, off int64, msg string) {
	line, _ := mg.pos.lineCol(off)
	mg.m.Refused = append(mg.m.Refused, FieldError{Path: path, Msg: fmt.Sprintf("%s (line %d)", msg, line)})
}

// walk visits every object key, acting on the table's entries.
func (mg *migrator) walk(n *jsonNode, path string) {
	for _, key := range append([]string(nil), n.keys...) {
		p := joinPath(path, key)
		child := n.fields[key]
		k, ok := upstreamByKey[p]
		switch {
		case !ok:
			if child.kind == kindObject {
				mg.walk(child, p)
			}
		case k.Outcome == Mapped:
			mg.pending = append(mg.pending, pendingAlias{key: k, path: p, val: child, off: n.keyOff[indexOf(n.keys, key)]})
		case k.Outcome == Refused && (k.DropWhen == DropAlways || compact(child) == k.DropWhen):
			mg.remove(p)
			why := k.Not
			if k.DropWhen != DropAlways {
				why = compact(child) + " is what aks-flex-node does"
			}
			did := strings.TrimSuffix(k.Did, oldSchema)
			mg.change("removed %s (upstream: it %s; %s)", p, did, why)
		case k.Outcome == Refused:
			mg.refuse(p, n.keyOff[indexOf(n.keys, key)], k.Message())
		case p == "agent.machineReconcileInterval" && child.kind == kindNumber:
			// Upstream's JSONDuration also takes nanoseconds as a number.
			if ns, err := child.num.Int64(); err == nil && ns > 0 {
				d := time.Duration(ns).String()
				*child = jsonNode{kind: kindString, str: d, offset: child.offset}
				mg.change("agent.machineReconcileInterval: %d nanoseconds written as %q", ns, d)
			}
		}
	}
}

func indexOf(keys []string, key string) int {
	for i, k := range keys {
		if k == key {
			return i
		}
	}
	return -1
}

// aliases moves each legacy key to its new name, unless the new key holds
// something else (then both stay, refused), and renames the cloud.
func (mg *migrator) aliases() {
	for _, a := range mg.pending {
		if a.val.kind != kindString {
			continue // Parse reports the type
		}
		v := aliasValue(a.key, a.val.str)
		cur := lookup(mg.root, a.key.To)
		switch {
		case cur == nil:
			mg.remove(a.path)
			mg.setString(a.key.To, v, fmt.Sprintf("moved %s to %s", a.path, a.key.To))
		case cur.kind == kindString && cur.str == v:
			mg.remove(a.path)
			mg.change("removed %s: %s holds the same value", a.path, a.key.To)
		default:
			mg.refuse(a.path, a.off, fmt.Sprintf("is upstream's legacy key for %s, which is also set, to a different value; keep only %s", a.key.To, a.key.To))
		}
	}
	if n := lookup(mg.root, "azure.cloud"); n != nil && n.kind == kindString {
		if k := cloudAlias(n.str); k != nil {
			n.str = k.ToValue
			mg.change("azure.cloud: %q written as %q", k.Value, k.ToValue)
		}
	}
}

// setString sets a string at path, creating objects on the way.
func (mg *migrator) setString(path, v, why string) {
	if n := lookup(mg.root, path); n != nil && n.kind == kindString && n.str == v {
		return
	}
	parts := strings.Split(path, ".")
	n := mg.root
	for _, p := range parts[:len(parts)-1] {
		next, ok := n.fields[p]
		if !ok || next.kind != kindObject {
			next = &jsonNode{kind: kindObject, fields: map[string]*jsonNode{}}
			setField(n, p, next)
		}
		n = next
	}
	setField(n, parts[len(parts)-1], &jsonNode{kind: kindString, str: v})
	mg.change("%s", why)
}

func setField(obj *jsonNode, key string, v *jsonNode) {
	if _, ok := obj.fields[key]; !ok {
		obj.keys = append(obj.keys, key)
		obj.keyOff = append(obj.keyOff, 0)
	}
	obj.fields[key] = v
}

// remove deletes the key at path and then every object that removing it
// left empty.
func (mg *migrator) remove(path string) { removePath(mg.root, path) }

func removePath(root *jsonNode, path string) {
	for path != "" {
		parentPath, key := "", path
		if i := strings.LastIndex(path, "."); i >= 0 {
			parentPath, key = path[:i], path[i+1:]
		}
		parent := root
		if parentPath != "" {
			parent = lookup(root, parentPath)
		}
		if parent == nil || parent.kind != kindObject {
			return
		}
		i := indexOf(parent.keys, key)
		if i < 0 {
			return
		}
		parent.keys = append(parent.keys[:i], parent.keys[i+1:]...)
		parent.keyOff = append(parent.keyOff[:i], parent.keyOff[i+1:]...)
		delete(parent.fields, key)
		if len(parent.keys) > 0 {
			return
		}
		path = parentPath
	}
}

func lookup(n *jsonNode, path string) *jsonNode {
	for _, p := range strings.Split(path, ".") {
		if n == nil || n.kind != kindObject {
			return nil
		}
		n = n.fields[p]
	}
	return n
}

// compact is a node's value as compact JSON, to compare with DropWhen.
func compact(n *jsonNode) string {
	var b bytes.Buffer
	writeNode(&b, n, "")
	var c bytes.Buffer
	if err := json.Compact(&c, b.Bytes()); err != nil {
		return ""
	}
	return c.String()
}

// writeNode writes n as json.MarshalIndent does with two spaces, keeping
// the document's key order and number literals.
func writeNode(b *bytes.Buffer, n *jsonNode, indent string) {
	inner := indent + "  "
	switch n.kind {
	case kindObject:
		if len(n.keys) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i, k := range n.keys {
			b.WriteString(inner)
			writeString(b, k)
			b.WriteString(": ")
			writeNode(b, n.fields[k], inner)
			if i < len(n.keys)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case kindArray:
		if len(n.elems) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, e := range n.elems {
			b.WriteString(inner)
			writeNode(b, e, inner)
			if i < len(n.elems)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	case kindString:
		writeString(b, n.str)
	case kindNumber:
		b.WriteString(n.num.String())
	case kindBool:
		fmt.Fprint(b, n.b)
	case kindNull:
		b.WriteString("null")
	}
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

// Diff is a unified diff from the input to Output, both written the way
// Output is (so a differently indented input shows only what changed)
// and with every credential redacted.
func (m *Migration) Diff(from, to string) string {
	if !m.Changed() {
		return ""
	}
	text := func(data []byte) string {
		root, err := parseTree(data)
		if err != nil {
			return ""
		}
		for _, n := range secretNodes(root) {
			*n = jsonNode{kind: kindString, offset: n.offset, str: "<redacted>"}
		}
		var b bytes.Buffer
		writeNode(&b, root, "")
		b.WriteByte('\n')
		return b.String()
	}
	d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(text(m.input)), B: difflib.SplitLines(text(m.Output)),
		FromFile: from, ToFile: to, Context: 3,
	})
	return d
}

package config

import (
	"bytes"
	"errors"
)

// secretPaths are the config keys that hold a credential, this schema's
// and the upstream ones it refuses but a host's file may still hold (a
// kubeconfig embedded as base64 carries a token or a private key that no
// pattern sees). This list is the one owner: a file holding one is
// written 0600 (migrate), and every display of a config file (migrate's
// diff, the support bundle) redacts each of them by path. A new secret
// key is added here and nowhere else.
var secretPaths = []string{
	"azure.bootstrapToken.token",
	"azure.servicePrincipal.clientSecret",
	"agent.kubeconfigData",
	"node.kubelet.kubeconfigData",
}

// SecretPaths returns the JSON paths of the config keys that hold a
// credential.
func SecretPaths() []string { return append([]string(nil), secretPaths...) }

// secretNodes are the values at secret paths that hold something: not
// absent, not null, not the empty string.
func secretNodes(root *jsonNode) []*jsonNode {
	var out []*jsonNode
	for _, p := range secretPaths {
		if n := lookup(root, p); n != nil && n.kind != kindNull && !(n.kind == kindString && n.str == "") {
			out = append(out, n)
		}
	}
	return out
}

func holdsSecret(root *jsonNode) bool { return len(secretNodes(root)) > 0 }

// ErrNotJSON says a config file could not be parsed, so its secrets could
// not be found by path.
var ErrNotJSON = errors.New("not a JSON document")

// RedactSecrets returns a config file with the value at every secret
// path replaced by with (whatever its type), written as migrate writes a
// config (the document's key order kept), the number of values replaced,
// and the secret values themselves as they were (strings as such, any
// other value as its JSON), so that a caller can also hide them wherever
// else they appear. A document that does not parse is refused with
// ErrNotJSON: its secrets cannot be found by path, and the parse error
// would quote it.
func RedactSecrets(data []byte, with string) (out []byte, n int, values []string, err error) {
	root, perr := parseTree(data)
	if perr != nil {
		return nil, 0, nil, ErrNotJSON
	}
	for _, node := range secretNodes(root) {
		if node.kind == kindString {
			values = append(values, node.str)
		} else {
			values = append(values, compact(node))
		}
		*node = jsonNode{kind: kindString, offset: node.offset, str: with}
		n++
	}
	var b bytes.Buffer
	writeNode(&b, root, "")
	b.WriteByte('\n')
	return b.Bytes(), n, values, nil
}

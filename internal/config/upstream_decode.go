package config

import (
	"fmt"
	"net/url"
	"strings"
)

// aliasUse is one upstream legacy key met while decoding.
type aliasUse struct {
	key   *UpstreamKey
	value string
	off   int64
}

// upstreamKey handles a key the schema does not have at path: it refuses
// an upstream key by name, records a legacy alias, or walks into one of
// upstream's sections. false leaves the key to the unknown-key error.
func (st *decodeState) upstreamKey(n *jsonNode, keyOff int64, path string) bool {
	if k, ok := upstreamByKey[path]; ok {
		switch k.Outcome {
		case Mapped:
			if n.kind != kindString {
				st.fail(n.offset, path, fmt.Sprintf("must be a string, found %s", n.kind))
			} else {
				st.aliases = append(st.aliases, aliasUse{key: k, value: n.str, off: keyOff})
			}
		default:
			st.fail(keyOff, path, k.Message())
		}
		return true
	}
	children := upstreamChildren(path)
	if len(children) == 0 {
		return false
	}
	if n.kind != kindObject {
		st.fail(n.offset, path, fmt.Sprintf("must be an object, found %s", n.kind))
		return true
	}
	for i, key := range n.keys {
		p := joinPath(path, key)
		if st.upstreamKey(n.fields[key], n.keyOff[i], p) {
			continue
		}
		msg := "unknown key"
		if s := suggest(key, children); s != "" {
			msg += fmt.Sprintf("; did you mean %s?", joinPath(path, s))
		} else {
			msg += fmt.Sprintf(" (upstream's keys here: %s)", strings.Join(children, ", "))
		}
		st.fail(n.keyOff[i], p, msg)
	}
	return true
}

// aliasTargets are the keys legacy aliases are read into.
var aliasTargets = map[string]func(*Config) *string{
	"components.kubernetes":    func(c *Config) *string { return &c.Components.Kubernetes },
	"components.containerd":    func(c *Config) *string { return &c.Components.Containerd },
	"components.runc":          func(c *Config) *string { return &c.Components.Runc },
	"components.sandboxImage":  func(c *Config) *string { return &c.Components.SandboxImage },
	"networking.cniVersion":    func(c *Config) *string { return &c.Networking.CNIVersion },
	"networking.dnsServiceIP":  func(c *Config) *string { return &c.Networking.DNSServiceIP },
	"node.kubelet.clusterFQDN": func(c *Config) *string { return &c.Node.Kubelet.ClusterFQDN },
	"azure.cloud":              func(c *Config) *string { return &c.Azure.Cloud },
}

// aliasValue is what a legacy key's value reads as under its new name:
// node.kubelet.serverURL keeps only a URL's host[:port], as upstream does.
func aliasValue(k *UpstreamKey, v string) string {
	if k.Key == "node.kubelet.serverURL" {
		if u, err := url.Parse(v); err == nil && u.Scheme != "" && u.Host != "" {
			return u.Host
		}
	}
	return v
}

// applyAliases reads the legacy keys met into their new names, refusing a
// pair that disagrees (upstream lets the new key win silently), and
// rewrites upstream's names of the US Government cloud.
func (st *decodeState) applyAliases(c *Config) error {
	for _, a := range st.aliases {
		p := aliasTargets[a.key.To](c)
		v := aliasValue(a.key, a.value)
		switch {
		case *p == "":
			*p = v
			c.notes = append(c.notes, a.key.note())
		case *p == v:
			c.notes = append(c.notes, fmt.Sprintf("%s is upstream's legacy key for %s, which holds the same value; remove it (`%s` does)", a.key.Key, a.key.To, migrateHint))
		default:
			st.fail(a.off, a.key.Key, fmt.Sprintf("is upstream's legacy key for %s, which is also set, to a different value; keep only %s", a.key.To, a.key.To))
		}
	}
	if k := cloudAlias(c.Azure.Cloud); k != nil {
		c.Azure.Cloud = k.ToValue
		c.notes = append(c.notes, k.note())
	}
	if len(st.errs) > 0 {
		return st.errs
	}
	return nil
}

// withFile names the file in messages that suggest `config migrate`.
func withFile(msg, file string) string {
	if file == "" {
		return msg
	}
	return strings.ReplaceAll(msg, migrateHint, strings.Replace(migrateHint, "FILE", file, 1))
}

// upstreamTypeHint explains a wrong type that is upstream's right one.
func upstreamTypeHint(path string, found jsonKind) string {
	if path == "agent.machineReconcileInterval" && found == kindNumber {
		return " (upstream's nanoseconds; `" + migrateHint + "` writes it as a duration)"
	}
	return ""
}

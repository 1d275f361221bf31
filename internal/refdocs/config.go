package refdocs

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
)

// configKey is one key of the public schema, as the code declares it.
type configKey struct {
	Path    string // JSON path; a list of objects ends in []
	Type    string
	Default string // what ApplyDefaults sets, Markdown; "" for none
	Secret  bool   // Redacted hides it
}

// hostnameMarker stands for the host's name while the defaults are
// computed, so the page does not carry the machine it was generated on.
const hostnameMarker = "hostname-of-the-host"

// configKeys walks config.Config by its JSON tags, in declaration order.
func configKeys() []configKey {
	var keys []configKey
	walkStruct(reflect.TypeFor[config.Config](), "", &keys)

	orig := config.Hostname
	config.Hostname = func() (string, error) { return hostnameMarker, nil }
	defer func() { config.Hostname = orig }()
	var defaults config.Config
	config.ApplyDefaults(&defaults)
	dv := flatten(&defaults)

	// A secret is a key whose value Redacted changes: fill every string
	// and compare.
	full := filled()
	before, after := flatten(full), flatten(full.Redacted())
	for i := range keys {
		k := &keys[i]
		if v, ok := dv[k.Path]; ok && !isZero(v) {
			k.Default = "`" + render(v) + "`"
			if v == hostnameMarker {
				k.Default = "the host's name, lowercased"
			}
		}
		if b, ok := before[k.Path]; ok && fmt.Sprint(b) != fmt.Sprint(after[k.Path]) {
			k.Secret = true
		}
	}
	return keys
}

func walkStruct(t reflect.Type, prefix string, out *[]configKey) {
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		if name == "" {
			continue
		}
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			walkStruct(ft, path+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			var fields []string
			for j := range ft.Elem().NumField() {
				if n := jsonName(ft.Elem().Field(j)); n != "" {
					fields = append(fields, n)
				}
			}
			*out = append(*out, configKey{Path: path + "[]", Type: "list of `{" + strings.Join(fields, ", ") + "}`"})
		default:
			*out = append(*out, configKey{Path: path, Type: typeName(ft)})
		}
	}
}

func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32:
		return "integer"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "map of " + typeName(t.Elem()) + "s"
	}
	return t.Kind().String()
}

// flatten is v's JSON, as leaf path -> value (objects walked, everything
// else a leaf).
func flatten(v any) map[string]any {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // config.Config always marshals
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		panic(err)
	}
	out := map[string]any{}
	var rec func(prefix string, m map[string]any)
	rec = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && !strings.HasSuffix(prefix+k, "labels") {
				rec(prefix+k+".", sub)
				continue
			}
			out[prefix+k] = v
		}
	}
	rec("", m)
	return out
}

// filled is a Config with every optional section present and every string
// set, for telling secrets apart.
func filled() *config.Config {
	c := &config.Config{}
	c.Azure.BootstrapToken = &config.BootstrapToken{}
	c.Azure.ManagedIdentity = &config.ManagedIdentity{}
	c.Azure.ServicePrincipal = &config.ServicePrincipal{}
	c.Azure.Arc = &config.Arc{}
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				fill(v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i))
				}
			}
		case reflect.String:
			v.SetString("abcdef.0123456789abcdef")
		}
	}
	fill(reflect.ValueOf(c))
	return c
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case float64:
		return x == 0
	case bool:
		return !x
	}
	return false
}

func render(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// Config renders the configuration reference: the schema's keys with
// their types and defaults from the code and the rule of each from the
// notes, then upstream AKS Flex Node's keys from config.UpstreamKeys.
func Config() (string, error) {
	notes, _, err := parseNotes(configNotesFile)
	if err != nil {
		return "", fmt.Errorf("notes/config.md: %w", err)
	}
	var b strings.Builder
	b.WriteString(configIntro)
	b.WriteString("\n| key | type | default | rule |\n|---|---|---|---|\n")
	var missing []string
	for _, k := range configKeys() {
		note, ok := notes[k.Path]
		if !ok {
			missing = append(missing, k.Path)
		}
		typ := k.Type
		if k.Secret {
			typ += " (secret)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, typ, k.Default, note)
	}
	if len(missing) > 0 {
		return "", errors.New("keys with no rule in internal/refdocs/notes/config.md: " + strings.Join(missing, ", "))
	}
	b.WriteString("\n")
	b.WriteString(configUpstreamIntro)
	b.WriteString("\n")
	b.WriteString(upstreamMarkdown())
	return b.String(), nil
}

// upstreamMarkdown is the table of upstream keys, made from
// config.UpstreamKeys.
func upstreamMarkdown() string {
	var b strings.Builder
	counts := map[config.Outcome]int{}
	b.WriteString("| upstream key | outcome here | notes |\n|---|---|---|\n")
	for _, k := range config.UpstreamKeys {
		counts[k.Outcome]++
		key := "`" + k.Key + "`"
		if k.Value != "" {
			key = "`" + k.Key + ": \"" + k.Value + "\"`"
		}
		out, note := string(k.Outcome), k.Here
		switch k.Outcome {
		case config.Mapped:
			out = "mapped to `" + k.To + "`"
			if k.Value != "" {
				out = "mapped to `\"" + k.ToValue + "\"`"
			}
		case config.Refused:
			note = k.Message()
			if k.DropWhen == config.DropAlways {
				out = "refused; `config migrate` removes it"
			} else if k.DropWhen != "" {
				out = "refused; `config migrate` removes `" + k.DropWhen + "`"
			}
		}
		b.WriteString("| " + key + " | " + out + " | " + strings.ReplaceAll(note, "|", "\\|") + " |\n")
	}
	var outcomes []string
	for _, o := range []config.Outcome{config.Implemented, config.Mapped, config.Refused, config.Ours} {
		outcomes = append(outcomes, string(o)+": "+strconv.Itoa(counts[o]))
	}
	b.WriteString("\nCounts: " + strings.Join(outcomes, ", ") + ".\n")
	return b.String()
}

// configPaths are the keys the schema declares.
func configPaths() map[string]bool {
	out := map[string]bool{}
	for _, k := range configKeys() {
		out[k.Path] = true
	}
	return out
}

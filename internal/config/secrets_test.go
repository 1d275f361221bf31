package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// secretName is what a key that holds a credential is called here and
// upstream.
var secretName = regexp.MustCompile(`(?i)(secret|password|passwd|token|kubeconfigdata|keydata|privatekey)$`)

// schemaPaths lists the JSON path of every leaf of t's JSON form.
func schemaPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		*out = append(*out, prefix)
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		schemaPaths(f.Type, p, out)
	}
}

// Every key, of this schema or upstream's, named like a credential is in
// SecretPaths, so that migrate writes it 0600 and every display of a
// config (migrate's diff, the support bundle) redacts it by path: a new
// secret key fails here until it is listed there.
func TestSecretLookingKeysAreSecretPaths(t *testing.T) {
	var paths []string
	schemaPaths(reflect.TypeFor[Config](), "", &paths)
	for _, k := range UpstreamKeys {
		paths = append(paths, k.Key)
	}
	secret := SecretPaths()
	found := map[string]bool{}
	for _, p := range paths {
		leaf := p[strings.LastIndex(p, ".")+1:]
		if !secretName.MatchString(leaf) {
			continue
		}
		found[p] = true
		if !slices.Contains(secret, p) {
			t.Errorf("%s is named like a credential but is not in config.SecretPaths: add it to secretPaths (secrets.go)", p)
		}
	}
	if len(found) < len(secret) {
		t.Errorf("only %d credential-looking keys found for %d secret paths: the walk misses the schema", len(found), len(secret))
	}
}

// RedactSecrets replaces the value at every secret path whatever its
// type, keeps the rest and the key order, and refuses what does not parse.
func TestRedactSecrets(t *testing.T) {
	in := `{"agent":{"nodeName":"n","kubeconfigData":{"odd":"shape"}},"azure":{"bootstrapToken":{"token":"abcdef.0123456789abcdef"}},"node":{"kubelet":{"kubeconfigData":""}}}`
	out, n, values, err := RedactSecrets([]byte(in), "X")
	if err != nil || n != 2 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	want := "{\n  \"agent\": {\n    \"nodeName\": \"n\",\n    \"kubeconfigData\": \"X\"\n  },\n  \"azure\": {\n    \"bootstrapToken\": {\n      \"token\": \"X\"\n    }\n  },\n  \"node\": {\n    \"kubelet\": {\n      \"kubeconfigData\": \"\"\n    }\n  }\n}\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if !slices.Equal(values, []string{"abcdef.0123456789abcdef", `{"odd":"shape"}`}) {
		t.Errorf("values %q", values)
	}
	if _, _, _, err := RedactSecrets([]byte(`{"agent":`), "X"); err != ErrNotJSON {
		t.Errorf("a truncated document: %v, want ErrNotJSON", err)
	}
}

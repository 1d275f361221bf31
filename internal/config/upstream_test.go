package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The table's page, docs/reference/config.md, is rendered from
// UpstreamKeys by internal/refdocs, whose test fails when it drifts.

// withSample is base plus the entry's sample at its key.
func withSample(t *testing.T, k UpstreamKey, sample string) map[string]any {
	t.Helper()
	m := base(t)
	if k.Outcome == Mapped {
		set(m, k.To, nil) // base sets clusterFQDN; the alias must be the only source
	}
	sample = strings.ReplaceAll(sample, `"`+sampleCA+`"`, `"`+caData(t)+`"`)
	var v any
	if err := json.Unmarshal([]byte(sample), &v); err != nil {
		t.Fatalf("%s: sample %s: %v", k.Key, sample, err)
	}
	set(m, k.Key, v)
	return m
}

func decodeMap(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return Decode(data)
}

// at is the compact JSON at a dotted path of v marshalled, "" if absent.
func at(t *testing.T, v any, path string) string {
	t.Helper()
	data, _ := json.Marshal(v)
	var m any
	_ = json.Unmarshal(data, &m)
	for _, p := range strings.Split(path, ".") {
		mm, ok := m.(map[string]any)
		if !ok {
			return ""
		}
		m = mm[p]
	}
	if m == nil {
		return ""
	}
	out, _ := json.Marshal(m)
	return string(out)
}

func TestUpstreamTableBehaves(t *testing.T) {
	for _, k := range UpstreamKeys {
		name := k.Key
		if k.Value != "" {
			name += "=" + k.Value
		}
		t.Run(name, func(t *testing.T) {
			switch k.Outcome {
			case Implemented, Ours:
				c, err := decodeMap(t, withSample(t, k, k.Sample))
				if err != nil {
					t.Fatalf("an implemented key must decode: %v", err)
				}
				want := strings.ReplaceAll(k.Sample, `"`+sampleCA+`"`, `"`+caData(t)+`"`)
				if got := at(t, c, k.Key); got != want {
					t.Errorf("decoded %s = %s, want the sample %s", k.Key, got, want)
				}
			case Mapped:
				checkMapped(t, k)
			case Refused:
				checkRefused(t, k)
			default:
				t.Fatalf("unknown outcome %q", k.Outcome)
			}
		})
	}
}

func checkMapped(t *testing.T, k UpstreamKey) {
	t.Helper()
	if aliasTargets[k.To] == nil {
		t.Fatalf("no alias target for %s", k.To)
	}
	c, err := decodeMap(t, withSample(t, k, k.Sample))
	if err != nil {
		t.Fatalf("a mapped key must decode: %v", err)
	}
	var want string
	_ = json.Unmarshal([]byte(k.Sample), &want)
	if k.SampleTo != "" {
		want = k.SampleTo
	}
	if got := *aliasTargets[k.To](c); got != want {
		t.Errorf("%s = %q, want %q", k.To, got, want)
	}
	if len(c.Notes()) != 1 || !strings.Contains(c.Notes()[0], k.Key) || !strings.Contains(c.Notes()[0], migrateHint) {
		t.Errorf("want one note naming %s, got %q", k.Key, c.Notes())
	}
	if k.Value != "" {
		return
	}
	// Both names with different values: an error at the legacy key.
	m := withSample(t, k, k.Sample)
	set(m, k.To, "9.9.9")
	if _, err := decodeMap(t, m); err == nil || !strings.Contains(err.Error(), k.Key+": is upstream's legacy key for "+k.To) {
		t.Errorf("a conflicting pair: got %v", err)
	}
	// Migrate moves it.
	mg := migrateMap(t, withSample(t, k, k.Sample))
	if len(mg.Changes) != 1 || !strings.Contains(mg.Changes[0], "moved "+k.Key+" to "+k.To) || len(mg.Refused) != 0 {
		t.Errorf("migrate: changes %q, refused %v", mg.Changes, mg.Refused)
	}
}

func checkRefused(t *testing.T, k UpstreamKey) {
	t.Helper()
	if k.Did == "" || k.Not == "" {
		t.Fatal("a refusal needs Did and Not")
	}
	_, err := decodeMap(t, withSample(t, k, k.Sample))
	var de DecodeErrors
	if !errors.As(err, &de) || len(de) != 1 || de[0].Path != k.Key || de[0].Msg != k.Message() {
		t.Fatalf("want exactly the refusal at %s, got %v", k.Key, err)
	}
	mg := migrateMap(t, withSample(t, k, k.Sample))
	dropped := len(mg.Refused) == 0 && len(mg.Changes) == 1 && strings.Contains(mg.Changes[0], "removed "+k.Key)
	kept := len(mg.Refused) == 1 && mg.Refused[0].Path == k.Key && !mg.Changed()
	switch {
	case k.DropWhen == DropAlways && !dropped:
		t.Errorf("migrate must remove it: changes %q, refused %v", mg.Changes, mg.Refused)
	case k.DropWhen != DropAlways && !kept:
		t.Errorf("migrate must keep the sample as a refusal: changes %q, refused %v", mg.Changes, mg.Refused)
	}
	if k.DropWhen != "" && k.DropWhen != DropAlways {
		mg := migrateMap(t, withSample(t, k, k.DropWhen))
		if len(mg.Refused) != 0 || len(mg.Changes) != 1 || !mg.Valid() {
			t.Errorf("migrate must remove %s: %s: changes %q, refused %v, problems %q", k.Key, k.DropWhen, mg.Changes, mg.Refused, mg.Problems)
		}
	}
}

func migrateMap(t *testing.T, m map[string]any) *Migration {
	t.Helper()
	data, _ := json.MarshalIndent(m, "", "  ")
	mg, err := Migrate(data, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return mg
}

// schemaKeys lists the leaf keys of the schema (maps and lists are leaves).
func schemaKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	fields, names := jsonFields(t)
	for _, n := range names {
		ft := fields[n]
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			schemaKeys(ft, joinPath(prefix, n), out)
			continue
		}
		*out = append(*out, joinPath(prefix, n))
	}
}

// Every key the schema accepts is in the table as implemented or ours, so
// docs/reference/config.md lists it and no key is accepted without an outcome.
func TestSchemaKeysAreInTheTable(t *testing.T) {
	var keys []string
	schemaKeys(reflect.TypeOf(Config{}), "", &keys)
	for _, key := range keys {
		k := upstreamByKey[key]
		if k == nil || (k.Outcome != Implemented && k.Outcome != Ours) {
			t.Errorf("%s is in the schema but not in UpstreamKeys as implemented or aks-flex-node only", key)
		}
	}
	seen := map[string]bool{}
	for _, k := range UpstreamKeys {
		id := k.Key + "=" + k.Value
		if seen[id] {
			t.Errorf("%s listed twice", id)
		}
		seen[id] = true
	}
}

func TestUpstreamTableCounts(t *testing.T) {
	counts := map[Outcome]int{}
	for _, k := range UpstreamKeys {
		counts[k.Outcome]++
	}
	t.Logf("implemented %d, mapped %d, refused %d, aks-flex-node only %d", counts[Implemented], counts[Mapped], counts[Refused], counts[Ours])
}

func TestUnknownKeysKeepDidYouMean(t *testing.T) {
	for doc, want := range map[string]string{
		`{"kubernetes": {"versoin": "1.35.0"}}`:                 "kubernetes.versoin: unknown key; did you mean kubernetes.version?",
		`{"hostRouting": {"zzz": 1}}`:                           "hostRouting.zzz: unknown key (known keys here: routeOverlap, staticRoutes)",
		`{"azure": {"arc": {"zzz": 1}}}`:                        "azure.arc.zzz: unknown key",
		`{"azure": {"subscriptionID": "x"}}`:                    "azure.subscriptionID: unknown key",
		`{"kubernetes": "1.35.0"}`:                              "kubernetes: must be an object, found a string",
		`{"cni": {"version": 1}}`:                               "cni.version: must be a string, found a number",
		`{"agent": {"machineReconcileInterval": 600000000000}}`: "agent.machineReconcileInterval: must be a string, found a number (upstream's nanoseconds; `aks-flex-node config migrate --from FILE` writes it as a duration)",
	} {
		_, err := Decode([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", doc, err, want)
		}
	}
}

func TestParseNamesTheFileInTheMigrateHint(t *testing.T) {
	_, err := Parse("/etc/x.json", []byte(`{"npd": {"version": "v1.35.1"}}`))
	if err == nil || !strings.Contains(err.Error(), "`aks-flex-node config migrate --from /etc/x.json`") {
		t.Fatalf("got %v", err)
	}
}

func TestMigrateLeavesOurConfigsByteIdentical(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.json")
	odd := []byte("{\"agent\":{\"nodeName\":\"n\"},   \"node\": {\"labels\": {}}}\n\n")
	for _, f := range append(files, "") {
		data := odd
		if f != "" {
			var err error
			if data, err = os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
		}
		m, err := Migrate(data, MigrateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !bytes.Equal(m.Output, data) || m.Changed() || m.Diff("a", "b") != "" {
			t.Errorf("%s: migrate changed an aks-flex-node config: %q", f, m.Changes)
		}
	}
}

func TestMigrateRedactsAndMarksSecrets(t *testing.T) {
	doc := []byte(`{"azure": {"subscriptionId": "x", "servicePrincipal": {"clientId": "c", "clientSecret": "hunter2-secret"}}}`)
	m, err := Migrate(doc, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Secret || strings.Contains(m.Diff("a", "b"), "hunter2") || !strings.Contains(m.Diff("a", "b"), `-    "subscriptionId": "x",`) {
		t.Errorf("secret %v, diff:\n%s", m.Secret, m.Diff("a", "b"))
	}
	if !strings.Contains(string(m.Output), "hunter2-secret") {
		t.Errorf("the output must keep the secret: %s", m.Output)
	}
	m, err = Migrate([]byte(`{"npd": {"version": "v1"}}`), MigrateOptions{})
	if err != nil || m.Secret || string(m.Output) != "{}\n" {
		t.Errorf("got %v %v %q", err, m.Secret, m.Output)
	}
	for _, bad := range []string{"", "[]", `{"a": 1, "a": 2}`, "{"} {
		if _, err := Migrate([]byte(bad), MigrateOptions{}); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

package strictjson

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	type spec struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"name":"a","count":1}`, ""},
		{`{"name":"a","cuont":1}`, `f.json: json: unknown field "cuont"`},
		{`{"count":"x"}`, "f.json: count: string is not a JSON int"},
		{`{"name":"a"} {}`, "f.json: data after the spec object"},
		{`{"name":`, "f.json: unexpected EOF"},
	} {
		var s spec
		err := Decode("f.json", []byte(tc.in), &s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want %q", tc.in, err, tc.want)
		}
	}
}

type versioned struct {
	SchemaVersion int    `json:"schemaVersion"`
	Name          string `json:"name"`
}

// TestDecodeSpec: a decode error stops at once; otherwise every problem
// is reported, the schema version's first, each naming the file and the
// field.
func TestDecodeSpec(t *testing.T) {
	version := func(v *versioned) int { return v.SchemaVersion }
	check := func(v *versioned, bad Bad) {
		if v.Name == "" {
			bad("name", "is required")
		}
	}
	if _, err := DecodeSpec("s.json", []byte(`{"schemaVersion":1,"nme":"x"}`), 1, version, check); err == nil || !strings.Contains(err.Error(), `s.json: json: unknown field "nme"`) {
		t.Fatalf("unknown field: %v", err)
	}
	_, err := DecodeSpec("s.json", []byte(`{"schemaVersion":2}`), 1, version, check)
	if err == nil || err.Error() != "s.json: schemaVersion: 2 is not supported (want 1)\ns.json: name: is required" {
		t.Fatalf("two problems: %v", err)
	}
	v, err := DecodeSpec("s.json", []byte(`{"schemaVersion":1,"name":"x"}`), 1, version, check)
	if err != nil || v.Name != "x" {
		t.Fatalf("valid: %+v %v", v, err)
	}
}

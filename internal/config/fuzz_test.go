package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse runs the strict decoder, defaults and validation (what every
// command does with a config file) on arbitrary bytes. Properties: it
// never panics or overflows the stack; a refusal is an *InvalidError whose
// every problem says where it is (a JSON path or a line, or it is about the
// whole file: empty or over the size limit); an accepted config survives a
// round trip through its JSON unchanged. The seed corpus is the examples,
// the cases of TestDecodeErrors and testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	examples, _ := filepath.Glob("../../examples/*.json")
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.json", data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		c2, err := Parse("again.json", again)
		if err != nil {
			t.Fatalf("accepted %q, but refused its own JSON %s: %v", data, again, err)
		}
		if third, _ := json.Marshal(c2); string(third) != string(again) {
			t.Fatalf("round trip changed the config:\n%s\n%s", again, third)
		}
	})
}

func checkRefusal(t *testing.T, data []byte, err error) {
	t.Helper()
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("refusal is %T, not *InvalidError: %v", err, err)
	}
	var de DecodeErrors
	var ve ValidationErrors
	switch {
	case errors.As(ie.Err, &de):
		if len(de) == 0 {
			t.Fatal("empty DecodeErrors")
		}
		for _, e := range de {
			whole := strings.HasPrefix(e.Msg, "the file is")
			if e.Path == "" && e.Line <= 0 && !whole {
				t.Fatalf("decode error without a path or a position: %q (input %q)", e.Msg, data)
			}
			if e.Line > 0 && (e.Column <= 0 || e.Line > strings.Count(string(data), "\n")+1) {
				t.Fatalf("decode error at line %d column %d of a %d-line input: %q", e.Line, e.Column, strings.Count(string(data), "\n")+1, e.Msg)
			}
		}
	case errors.As(ie.Err, &ve):
		if len(ve) == 0 {
			t.Fatal("empty ValidationErrors")
		}
		for _, e := range ve {
			if e.Path == "" {
				t.Fatalf("validation error without a path: %q (input %q)", e.Msg, data)
			}
		}
	default:
		t.Fatalf("refusal carries %T: %v", ie.Err, ie.Err)
	}
}

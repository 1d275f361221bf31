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

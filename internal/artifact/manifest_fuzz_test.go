package artifact

import (
	"encoding/json"
	"path"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseManifest feeds arbitrary bytes to the bundle manifest reader.
// Properties: it never panics; every line of an error names the file; a
// manifest it accepts has only paths that stay inside the bundle, and
// reads back the same after being written out (what BuildManifest and
// WriteManifest produce is what it accepts). The seed corpus
// (testdata/fuzz/FuzzParseManifest) holds a valid manifest and the
// refusals the unit tests know: escapes, duplicates, unknown fields,
// trailing data, wrong types.
func FuzzParseManifest(f *testing.F) {
	const name = "/var/lib/aks-flex-node/bundles/k8s/manifest.json"
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(name, data)
		if err != nil {
			if m != nil {
				t.Fatalf("manifest and error both returned: %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, name+": ") {
					t.Fatalf("error line does not name the file: %q", line)
				}
			}
			return
		}
		for _, p := range allPaths(m) {
			if validRel(p) != nil || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("accepted path %q leaves the bundle", p)
			}
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseManifest(name, out)
		if err != nil {
			t.Fatalf("accepted manifest does not read back: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("manifest changed on a round trip:\n%+v\n%+v", m, again)
		}
	})
}

func allPaths(m *Manifest) []string {
	var ps []string
	for _, f := range m.Files {
		ps = append(ps, f.Path)
	}
	for _, im := range m.Images {
		ps = append(ps, im.Path)
	}
	for _, l := range m.Legal {
		ps = append(ps, l.Path)
	}
	return ps
}

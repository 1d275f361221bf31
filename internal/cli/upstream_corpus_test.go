package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/upstream")

// corpusDir holds configs written to upstream AKS Flex Node's documented
// schema, each with its golden outcome (NAME.validate.golden: what
// `config validate` says), migrate's report (NAME.migrate.golden) and
// migrate's output (NAME.migrated.json, absent when it does not change
// the file).
const corpusDir = "../../testdata/upstream"

func TestUpstreamCorpus(t *testing.T) {
	config.Hostname = func() (string, error) { return "corpus-host", nil }
	defer func() { config.Hostname = os.Hostname }()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("corpus: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".migrated.json") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := run(t, "config", "validate", "--config", f)
			golden(t, name+".validate.golden", fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr))

			out := filepath.Join(t.TempDir(), "out.json")
			stdout, stderr, code = run(t, "config", "migrate", "--from", f, "--output", out)
			migrated, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			report := strings.ReplaceAll(stdout+stderr, out, "OUT")
			golden(t, name+".migrate.golden", fmt.Sprintf("exit %d\nmode %04o\n%s", code, st.Mode().Perm(), report))
			if bytes.Equal(migrated, in) {
				if _, err := os.Stat(filepath.Join(corpusDir, name+".migrated.json")); err == nil {
					t.Errorf("migrate no longer changes %s, but %s.migrated.json exists", f, name)
				}
				return
			}
			golden(t, name+".migrated.json", string(migrated))
			// Migrating the result changes nothing more.
			again, err := config.Migrate(migrated, config.MigrateOptions{})
			if err != nil || again.Changed() {
				t.Errorf("migrating the output again: %v %q", err, again.Changes)
			}
		})
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join(corpusDir, name)
	if *updateGolden {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -run TestUpstreamCorpus -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run go test ./internal/cli -run TestUpstreamCorpus -update to accept):\n--- want\n%s\n--- got\n%s", p, want, got)
	}
}

func TestMigrateWritesStdoutAndNeverTheInput(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.json")
	in := `{"kubernetes": {"version": "1.35.0"}, "azure": {"bootstrapToken": {"token": "abcdef.0123456789abcdef"}}}`
	if err := os.WriteFile(f, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, "config", "migrate", "--from", f, "--host-prefix", "/opt/aks-flex-node")
	if code != ExitInvalid || !strings.Contains(stdout, `"hostPrefix": "/opt/aks-flex-node"`) || !strings.Contains(stdout, `"kubernetes": "1.35.0"`) {
		t.Errorf("exit %d, stdout %s", code, stdout)
	}
	if !strings.Contains(stderr, "moved kubernetes.version to components.kubernetes") || strings.Contains(stderr, "0123456789abcdef") ||
		!strings.Contains(stderr, "node.kubelet.clusterFQDN: is required") {
		t.Errorf("report: %s", stderr)
	}
	if data, _ := os.ReadFile(f); string(data) != in {
		t.Errorf("the input changed: %s", data)
	}
	// --output naming the input replaces it.
	if _, _, code := run(t, "config", "migrate", "--from", f, "--output", f); code != ExitInvalid {
		t.Errorf("exit %d", code)
	}
	if data, _ := os.ReadFile(f); !strings.Contains(string(data), `"components"`) {
		t.Errorf("--output naming the input: %s", data)
	}
	if _, _, code := run(t, "config", "migrate"); code != ExitInvalid {
		t.Errorf("no --from: exit %d", code)
	}
	if _, _, code := run(t, "config", "migrate", "--from", filepath.Join(t.TempDir(), "none.json")); code != ExitFailure {
		t.Errorf("unreadable: exit %d", code)
	}
}

func TestDeprecationNoteOnLoad(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.json")
	data, err := os.ReadFile(filepath.Join(corpusDir, "legacy-aliases.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "config", "view", "--config", f)
	if code != 0 || strings.Count(stderr, "deprecated: ") != 8 || !strings.Contains(stderr, "cni.version is upstream's legacy key; read as networking.cniVersion (`aks-flex-node config migrate --from "+f+"` renames it)") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

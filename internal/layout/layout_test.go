package layout

import (
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestLayoutJSONGolden(t *testing.T) {
	for name, prefix := range map[string]string{"default": "", "opt": "/opt/aks-flex-node"} {
		t.Run(name, func(t *testing.T) {
			l, err := New("/", prefix, "")
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(l, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "layout-"+name+".json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(got)+"\n" != string(want) {
				t.Errorf("layout JSON for prefix %q:\n%s\nwant:\n%s", prefix, got, want)
			}
		})
	}
}

func TestLayoutPaths(t *testing.T) {
	l, err := New("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if l.AgentBinary() != "/usr/local/bin/aks-flex-node" || l.LibDir() != "/usr/local/lib/aks-flex-node" {
		t.Errorf("default layout: %+v", l)
	}
	p, err := New("/tmp/root", "/opt/aks-flex-node", "/var/log/custom")
	if err != nil {
		t.Fatal(err)
	}
	if p.AgentBinary() != "/opt/aks-flex-node/bin/aks-flex-node" || p.RecoveryScript() != "/opt/aks-flex-node/lib/aks-flex-node-recovery.sh" {
		t.Errorf("prefix layout: %+v", p)
	}
	if p.SystemdUnitDir() != "/etc/systemd/system" || p.StateDir() != "/var/lib/aks-flex-node" || p.LogDir() != "/var/log/custom" {
		t.Errorf("fixed paths moved with the prefix: %+v", p)
	}
	if got := p.OnRoot(p.AgentBinary()); got != "/tmp/root/opt/aks-flex-node/bin/aks-flex-node" {
		t.Errorf("OnRoot = %q", got)
	}
	if got := l.OnRoot(l.AgentBinary()); got != l.AgentBinary() {
		t.Errorf("OnRoot on / = %q", got)
	}
	if _, err := New("/", "relative", ""); err == nil {
		t.Error("New accepted an invalid prefix")
	}
	for _, k := range KeyOrder {
		if _, err := p.Get(k); err != nil {
			t.Errorf("Get(%q): %v", k, err)
		}
	}
	if len(KeyOrder) != len(p.Keys()) {
		t.Errorf("KeyOrder has %d keys, Keys has %d", len(KeyOrder), len(p.Keys()))
	}
	if _, err := p.Get("nope"); err == nil {
		t.Error("Get accepted an unknown key")
	}
}

func TestIsBinDir(t *testing.T) {
	for dir, want := range map[string]string{"/usr/local/bin": "", "/opt/aks-flex-node/bin": "/opt/aks-flex-node"} {
		got, err := IsBinDir(dir)
		if err != nil || got != want {
			t.Errorf("IsBinDir(%q) = %q, %v; want %q", dir, got, err, want)
		}
	}
	for _, dir := range []string{"/bin", "/opt/aks/sbin", "/opt/a b/bin", "/run/x/bin", "bin", "/opt/x/bin/"} {
		if _, err := IsBinDir(dir); err == nil {
			t.Errorf("IsBinDir(%q) accepted", dir)
		}
	}
}

// TestPrefixRuleHasOneCaller: the prefix rule runs in layout.New (and in
// IsBinDir, which answers install.sh about a directory, not a layout);
// everything downstream trusts the Layout New made. A second caller in
// product code would mean some consumer stopped trusting it.
func TestPrefixRuleHasOneCaller(t *testing.T) {
	allowed := map[string]bool{"New": true, "IsBinDir": true}
	fset := token.NewFileSet()
	for _, dir := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					name := ""
					switch f := call.Fun.(type) {
					case *ast.Ident:
						name = f.Name
					case *ast.SelectorExpr:
						name = f.Sel.Name
					}
					if name == "ValidatePrefix" && !(filepath.Base(p) == "layout.go" && allowed[fn.Name.Name]) {
						t.Errorf("%s: %s calls ValidatePrefix; take a Layout from layout.New instead", fset.Position(call.Pos()), fn.Name.Name)
					}
					return true
				})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

package ignition

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v33 "github.com/coreos/ignition/v2/config/v3_3"
	v34 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/validate"

	"github.com/Azure/aks-flex-node/internal/config"
)

func example(t testing.TB, name string) (*config.Config, []byte, string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "examples", name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(p, data)
	if err != nil {
		t.Fatal(err)
	}
	return c, data, p
}

func withPrefix(t *testing.T, prefix, logDir string) (*config.Config, []byte) {
	t.Helper()
	_, data, _ := example(t, "acl-bootstrap-token.json")
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	agent := m["agent"].(map[string]any)
	if prefix == "" {
		delete(agent, "hostPrefix")
	} else {
		agent["hostPrefix"] = prefix
	}
	if logDir != "" {
		agent["logDir"] = logDir
	}
	out, _ := json.Marshal(m)
	c, err := config.Parse("test.json", out)
	if err != nil {
		t.Fatal(err)
	}
	return c, out
}

// parsed is the subset of a rendered config the tests look at.
type parsed struct {
	Ignition struct{ Version string }
	Storage  struct {
		Files []struct {
			Path      string
			Mode      int
			Overwrite bool
			User      struct{ ID *int }
			Contents  struct {
				Source       string
				Compression  string
				Verification struct{ Hash string }
			}
		}
		Links       []struct{ Path string }
		Directories []struct{ Path string }
	}
	Systemd struct {
		Units []struct {
			Name     string
			Enabled  bool
			Contents string
		}
	}
}

func decode(t *testing.T, raw []byte) parsed {
	t.Helper()
	var p parsed
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRenderValidatesForEachSpec(t *testing.T) {
	c, data, file := example(t, "acl-bootstrap-token.json")
	bin := bytes.Repeat([]byte("\x7fELF fake agent binary "), 4096)
	for _, spec := range Specs {
		for _, src := range []string{"url", "embedded"} {
			t.Run(spec+"/"+src, func(t *testing.T) {
				o := Options{Spec: spec, Config: c, ConfigData: data, ConfigFile: file}
				if src == "url" {
					o.BinaryURL = "https://example.invalid/aks-flex-node"
					o.BinarySHA256 = strings.Repeat("ab", 32)
				} else {
					o.Binary = bin
				}
				r, err := Render(o)
				if err != nil {
					t.Fatal(err)
				}
				// The library's parser for exactly this spec accepts it
				// (it validates too), and the validator alone reports nothing.
				switch spec {
				case Spec33:
					cfg, rpt, err := v33.Parse(r.JSON)
					if err != nil || len(rpt.Entries) > 0 {
						t.Fatalf("v3_3.Parse: %v\n%s", err, rpt)
					}
					if rpt := validate.ValidateWithContext(cfg, r.JSON); len(rpt.Entries) > 0 {
						t.Fatalf("validate: %s", rpt)
					}
				case Spec34:
					cfg, rpt, err := v34.Parse(r.JSON)
					if err != nil || len(rpt.Entries) > 0 {
						t.Fatalf("v3_4.Parse: %v\n%s", err, rpt)
					}
					if rpt := validate.ValidateWithContext(cfg, r.JSON); len(rpt.Entries) > 0 {
						t.Fatalf("validate: %s", rpt)
					}
				}
				if res := Check("rendered", r.JSON); !res.Valid || len(res.Entries) != 0 || res.Spec != spec {
					t.Fatalf("Check: %+v", res)
				}
				p := decode(t, r.JSON)
				if p.Ignition.Version != spec {
					t.Errorf("version %q", p.Ignition.Version)
				}
				files := map[string]int{}
				for i, f := range p.Storage.Files {
					files[f.Path] = i
				}
				cf, ok := files["/etc/aks-flex-node/config.json"]
				if !ok || p.Storage.Files[cf].Mode != 0o600 || p.Storage.Files[cf].User.ID == nil || *p.Storage.Files[cf].User.ID != 0 {
					t.Fatalf("config file entry: %+v", p.Storage.Files)
				}
				if got := decodeData(t, p.Storage.Files[cf].Contents.Source, ""); !bytes.Equal(got, data) {
					t.Errorf("embedded config differs from the file")
				}
				bf, ok := files["/opt/aks-flex-node/bin/aks-flex-node"]
				if !ok || p.Storage.Files[bf].Mode != 0o755 {
					t.Fatalf("binary entry: %+v", p.Storage.Files)
				}
				b := p.Storage.Files[bf].Contents
				if src == "url" {
					if b.Source != o.BinaryURL || b.Verification.Hash != "sha256-"+o.BinarySHA256 {
						t.Errorf("url binary: %+v", b)
					}
				} else {
					sum := sha256.Sum256(bin)
					if b.Compression != "gzip" || b.Verification.Hash != "sha256-"+hex.EncodeToString(sum[:]) {
						t.Errorf("embedded binary: compression %q hash %q", b.Compression, b.Verification.Hash)
					}
					if got := decodeData(t, b.Source, "gzip"); !bytes.Equal(got, bin) {
						t.Errorf("embedded binary differs")
					}
					if r.BinaryEncodedBytes >= len(bin) {
						t.Errorf("compressed data URL %d bytes for a %d-byte binary", r.BinaryEncodedBytes, len(bin))
					}
				}
				if len(p.Systemd.Units) != 1 || p.Systemd.Units[0].Name != "aks-flex-node-firstboot.service" || !p.Systemd.Units[0].Enabled {
					t.Fatalf("units: %+v", p.Systemd.Units)
				}
				unit := p.Systemd.Units[0].Contents
				for _, want := range []string{
					"ExecStart=/opt/aks-flex-node/bin/aks-flex-node start --config /etc/aks-flex-node/config.json",
					"ConditionPathExists=!/var/lib/aks-flex-node/joined",
					"After=network-online.target", "Wants=network-online.target", "WantedBy=multi-user.target",
				} {
					if !strings.Contains(unit, want) {
						t.Errorf("unit lacks %q:\n%s", want, unit)
					}
				}
				assertNothingUnderUsr(t, r.JSON)
			})
		}
	}
}

func decodeData(t *testing.T, src, compression string) []byte {
	t.Helper()
	const prefix = "data:;base64,"
	if !strings.HasPrefix(src, prefix) {
		t.Fatalf("source %.40q is not a base64 data URL", src)
	}
	b, err := base64.StdEncoding.DecodeString(src[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	if compression == "gzip" {
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// assertNothingUnderUsr: no file, directory or link, and no path a unit
// names, is under /usr.
func assertNothingUnderUsr(t *testing.T, raw []byte) {
	t.Helper()
	p := decode(t, raw)
	for _, f := range p.Storage.Files {
		if underUsr(f.Path) {
			t.Errorf("file under /usr: %s", f.Path)
		}
	}
	for _, l := range p.Storage.Links {
		if underUsr(l.Path) {
			t.Errorf("link under /usr: %s", l.Path)
		}
	}
	for _, d := range p.Storage.Directories {
		if underUsr(d.Path) {
			t.Errorf("directory under /usr: %s", d.Path)
		}
	}
	for _, u := range p.Systemd.Units {
		if strings.Contains(u.Contents, "/usr/") {
			t.Errorf("unit %s names a /usr path:\n%s", u.Name, u.Contents)
		}
	}
}

func TestRenderRefusals(t *testing.T) {
	noPrefix, noPrefixData := withPrefix(t, "", "")
	usrPrefix, usrPrefixData := withPrefix(t, "/usr/aks-flex-node", "")
	usrLog, usrLogData := withPrefix(t, "/opt/aks-flex-node", "/usr/log/aks")
	ok, okData := withPrefix(t, "/opt/aks-flex-node", "")
	bin := []byte("\x7fELF binary")
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no prefix on ACL", Options{Config: noPrefix, ConfigData: noPrefixData, ConfigFile: "c.json", Binary: bin}, "agent.hostPrefix is empty in c.json"},
		{"no prefix on ACL, explicit target", Options{Target: TargetACL, Config: noPrefix, ConfigData: noPrefixData, ConfigFile: "c.json", Binary: bin}, "/usr/local/bin/aks-flex-node"},
		{"prefix under /usr", Options{Config: usrPrefix, ConfigData: usrPrefixData, ConfigFile: "c.json", Binary: bin}, "agent.hostPrefix /usr/aks-flex-node in c.json is under /usr"},
		{"logDir under /usr", Options{Config: usrLog, ConfigData: usrLogData, ConfigFile: "c.json", Binary: bin}, "agent.logDir in c.json puts logDir at /usr/log/aks"},
		{"unknown spec", Options{Spec: "3.5.0", Config: ok, ConfigData: okData, Binary: bin}, `--spec "3.5.0"`},
		{"unknown target", Options{Target: "flatcar", Config: ok, ConfigData: okData, Binary: bin}, `--target "flatcar"`},
		{"no binary", Options{Config: ok, ConfigData: okData}, "no agent binary"},
		{"url without hash", Options{Config: ok, ConfigData: okData, BinaryURL: "https://example.invalid/a"}, "--binary-sha256"},
		{"url with a short hash", Options{Config: ok, ConfigData: okData, BinaryURL: "https://example.invalid/a", BinarySHA256: "abcd"}, "64 hex digits"},
		{"url not http", Options{Config: ok, ConfigData: okData, BinaryURL: "file:///tmp/a", BinarySHA256: strings.Repeat("0", 64)}, "--binary-url"},
		{"both", Options{Config: ok, ConfigData: okData, BinaryURL: "https://example.invalid/a", BinarySHA256: strings.Repeat("0", 64), Binary: bin}, "not both"},
		{"empty binary", Options{Config: ok, ConfigData: okData, Binary: []byte{}}, "empty"},
		{"not an executable", Options{Config: ok, ConfigData: okData, Binary: []byte("\x1f\x8b\x08 a tarball")}, "not an ELF executable"},
	}
	for _, tc := range cases {
		_, err := Render(tc.o)
		if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want an invalid-input error containing %q", tc.name, err, tc.want)
		}
	}
	// The generic target takes the classic layout (a host with a writable /usr).
	r, err := Render(Options{Target: TargetGeneric, Config: noPrefix, ConfigData: noPrefixData, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.JSON), `"/usr/local/bin/aks-flex-node"`) {
		t.Errorf("generic target without prefix should place the binary in /usr/local/bin")
	}
}

package ignition

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func b64(b []byte) []byte { return []byte(base64.StdEncoding.EncodeToString(b)) }

// wrapped76 is base64 with line breaks, as some tools emit customData.
func wrapped76(b []byte) []byte {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 76 {
		out.WriteString(s[:76] + "\n")
		s = s[76:]
	}
	out.WriteString(s + "\n")
	return []byte(out.String())
}

func TestClassify(t *testing.T) {
	ign := readTestdata(t, "handwritten-usr.ign")
	sh := readTestdata(t, "join.sh")
	cc := readTestdata(t, "cloud-config.yaml")
	mp := readTestdata(t, "multipart.txt")
	cases := []struct {
		name     string
		data     []byte
		kind     Kind
		encoding string
		spec     string
		detail   string
	}{
		{"ignition raw", ign, KindIgnition, "raw", "3.3.0", ""},
		{"ignition base64", b64(ign), KindIgnition, "base64", "3.3.0", ""},
		{"ignition base64 wrapped", wrapped76(ign), KindIgnition, "base64", "3.3.0", ""},
		{"ignition gzip", gz(t, ign), KindIgnition, "gzip", "3.3.0", ""},
		{"ignition base64 of gzip", b64(gz(t, ign)), KindIgnition, "base64+gzip", "3.3.0", ""},
		{"ignition spec 3.4", readTestdata(t, "unrelated.ign"), KindIgnition, "raw", "3.4.0", ""},
		{"ignition spec 2", readTestdata(t, "spec2.ign"), KindIgnition, "raw", "2.3.0", ""},
		{"shell", sh, KindShellScript, "raw", "", "#!/bin/bash"},
		{"shell base64", b64(sh), KindShellScript, "base64", "", "#!/bin/bash"},
		{"cloud-config", cc, KindCloudConfig, "raw", "", ""},
		{"cloud-config base64", b64(cc), KindCloudConfig, "base64", "", ""},
		{"multipart", mp, KindMIMEMultipart, "raw", "", ""},
		{"cloud-boothook", []byte("#cloud-boothook\necho hi\n"), KindCloudInit, "raw", "", "#cloud-boothook"},
		{"empty", []byte("  \n"), KindEmpty, "raw", "", ""},
		{"json, not ignition", []byte(`{"hello": "world"}`), KindUnknown, "raw", "", "JSON without ignition.version"},
		{"text", []byte("hello world\n"), KindUnknown, "raw", "", ""},
		{"broken gzip", []byte{0x1f, 0x8b, 0x08, 0x00, 0x01}, KindUnknown, "raw", "", "gzip that does not decompress"},
	}
	for _, tc := range cases {
		p := Classify("src", tc.data)
		if p.Kind != tc.kind || p.Encoding != tc.encoding || p.Spec != tc.spec || !strings.HasPrefix(p.Detail, tc.detail) {
			t.Errorf("%s: got kind=%s encoding=%s spec=%q detail=%q, want %s %s %q %q", tc.name, p.Kind, p.Encoding, p.Spec, p.Detail, tc.kind, tc.encoding, tc.spec, tc.detail)
		}
	}
}

// A gzip bomb is refused, not decompressed into memory.
func TestClassifyBoundsGzip(t *testing.T) {
	p := Classify("src", gz(t, make([]byte, maxPayload+10)))
	if p.Kind != KindUnknown || !strings.Contains(p.Detail, "more than") {
		t.Fatalf("got %+v", p)
	}
}

func TestCheckFindings(t *testing.T) {
	res := Check("handwritten-usr.ign", readTestdata(t, "handwritten-usr.ign"))
	if res.Valid || res.Spec != "3.3.0" {
		t.Fatalf("%+v", res)
	}
	want := map[string]string{
		"$.storage.files.1.path":     "/usr/local/bin/aks-flex-node is under /usr",
		"$.systemd.units.0.contents": "/usr/local/bin/aks-flex-node is under /usr",
	}
	for _, e := range res.Entries {
		if w, ok := want[e.Path]; ok && strings.Contains(e.Message, w) && e.Severity == "error" {
			delete(want, e.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing findings %v in %+v", want, res.Entries)
	}

	// Ignition's own validator, with its JSON path.
	res = Check("invalid.ign", readTestdata(t, "invalid.ign"))
	if res.Valid || len(res.Entries) == 0 || res.Entries[0].Path != "$.storage.files.0.path" || res.Entries[0].Severity != "error" {
		t.Fatalf("invalid: %+v", res)
	}
	var out bytes.Buffer
	if err := res.WriteText(&out); err != nil || !strings.Contains(out.String(), "invalid.ign: Ignition spec 3.3.0: INVALID") || !strings.Contains(out.String(), "error at $.storage.files.0.path") {
		t.Fatalf("text: %v %q", err, out.String())
	}

	// A config that does not install the agent may use /usr as it likes.
	if res := Check("unrelated.ign", readTestdata(t, "unrelated.ign")); !res.Valid || res.Spec != "3.4.0" {
		t.Fatalf("unrelated: %+v", res)
	}
	if res := Check("spec2.ign", readTestdata(t, "spec2.ign")); res.Valid || !strings.Contains(res.Entries[len(res.Entries)-1].Message, "spec 2") {
		t.Fatalf("spec2: %+v", res)
	}
	if res := Check("x", []byte("not json")); res.Valid {
		t.Fatalf("not json: %+v", res)
	}
}

func TestAssess(t *testing.T) {
	c, data, file := example(t, "acl-bootstrap-token.json")
	r, err := Render(Options{Config: c, ConfigData: data, ConfigFile: file, Binary: []byte("\x7fELF bin")})
	if err != nil {
		t.Fatal(err)
	}
	const cd = "/var/lib/waagent/CustomData"
	ours := Classify(cd, b64(r.JSON))
	usr := Classify(cd, readTestdata(t, "handwritten-usr.ign"))
	sh := Classify(cd, readTestdata(t, "join.sh"))
	cc := Classify(cd, b64(readTestdata(t, "cloud-config.yaml")))

	one := func(ps []Problem, sev string, parts ...string) {
		t.Helper()
		if len(ps) != 1 || ps[0].Severity != sev {
			t.Fatalf("want one %s, got %+v", sev, ps)
		}
		for _, s := range parts {
			if !strings.Contains(ps[0].Message, s) {
				t.Errorf("message %q lacks %q", ps[0].Message, s)
			}
		}
		if ps[0].Remedy == "" {
			t.Errorf("no remedy")
		}
	}
	one(Assess([]Payload{ours}, hostos.FamilyDebian), "error", cd, "spec 3.3.0", "does not run Ignition", "family debian")
	one(Assess([]Payload{ours}, hostos.FamilyUbuntu), "error", cd, "spec 3.3.0")
	one(Assess([]Payload{ours}, hostos.FamilyUnknown), "warning", cd, "unknown")
	if ps := Assess([]Payload{ours}, hostos.FamilyACL); len(ps) != 0 {
		t.Errorf("rendered config on ACL: %+v", ps)
	}
	if ps := Assess([]Payload{ours}, hostos.FamilyFlatcar); len(ps) != 0 {
		t.Errorf("rendered config on Flatcar: %+v", ps)
	}
	ps := Assess([]Payload{usr}, hostos.FamilyACL)
	if len(ps) != 2 {
		t.Fatalf("/usr config on ACL: %+v", ps)
	}
	for _, p := range ps {
		if p.Severity != "error" || !strings.Contains(p.Message, "/usr/local/bin/aks-flex-node") || !strings.Contains(p.Message, cd) {
			t.Errorf("%+v", p)
		}
	}
	if ps := Assess([]Payload{sh, cc}, hostos.FamilyDebian); len(ps) != 0 {
		t.Errorf("shell and cloud-config on Debian: %+v", ps)
	}
	ps = Assess([]Payload{sh}, hostos.FamilyACL)
	if len(ps) != 1 || ps[0].Severity != "warning" || !strings.Contains(ps[0].Message, "shell script") {
		t.Errorf("shell on ACL: %+v", ps)
	}
}

// fakeIMDS speaks the documented protocol: GET with "Metadata: true" or 400,
// the userData base64-encoded.
func fakeIMDS(t *testing.T, userData []byte) (*httptest.Server, *int) {
	t.Helper()
	hits := new(int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*hits++
		if r.Header.Get("Metadata") != "true" {
			http.Error(w, `{"error":"Bad request. Required metadata header not specified"}`, http.StatusBadRequest)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/metadata/instance/compute/userData" ||
			r.URL.Query().Get("api-version") == "" || r.URL.Query().Get("format") != "text" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		_, _ = w.Write(b64(userData))
	}))
	t.Cleanup(srv.Close)
	return srv, hits
}

func TestCollect(t *testing.T) {
	root := t.TempDir()
	cdPath := filepath.Join(root, DefaultCustomDataPath)
	if err := os.MkdirAll(filepath.Dir(cdPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cdPath, b64(readTestdata(t, "join.sh")), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, hits := fakeIMDS(t, readTestdata(t, "handwritten-usr.ign"))
	f := Sources{Root: root, IMDSEndpoint: srv.URL}.Collect(context.Background())
	if len(f.Payloads) != 2 || *hits != 1 {
		t.Fatalf("payloads %+v notes %v hits %d", f.Payloads, f.Notes, *hits)
	}
	if p := f.Payloads[0]; p.Source != DefaultCustomDataPath || p.Kind != KindShellScript || p.Encoding != "base64" {
		t.Errorf("customData: %+v", p)
	}
	if p := f.Payloads[1]; !strings.HasPrefix(p.Source, "IMDS userData") || p.Kind != KindIgnition || p.Spec != "3.3.0" || p.Encoding != "base64" {
		t.Errorf("userData: %+v", p)
	}

	// Without the header the fake answers 400 like IMDS, which is reported.
	plain := &http.Client{Transport: dropHeader{}}
	f = Sources{Root: root, IMDSEndpoint: srv.URL, Client: plain}.Collect(context.Background())
	if len(f.Payloads) != 1 || !strings.Contains(strings.Join(f.Notes, "\n"), "HTTP 400") {
		t.Errorf("without the header: %+v", f)
	}

	// Disabled and absent: notes, no payloads, no request.
	before := *hits
	f = Sources{Root: t.TempDir(), IMDSEndpoint: IMDSOff}.Collect(context.Background())
	if len(f.Payloads) != 0 || *hits != before || !strings.Contains(strings.Join(f.Notes, "\n"), DefaultCustomDataPath+" absent") {
		t.Errorf("absent: %+v", f)
	}
}

type dropHeader struct{}

func (dropHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("Metadata")
	return http.DefaultTransport.RoundTrip(r)
}

func TestSourcesFromEnv(t *testing.T) {
	azure := hostos.AzureVM{Azure: true, Evidence: "tag"}
	t.Setenv(EnvIMDSEndpoint, "")
	t.Setenv(EnvCustomData, "")
	if s := sourcesFromEnv("/", azure); s.IMDSEndpoint != DefaultIMDSEndpoint || s.CustomData != DefaultCustomDataPath || s.IMDSSkipped != "" {
		t.Errorf("defaults: %+v", s)
	}
	if s := sourcesFromEnv("/some/tree", azure); s.IMDSEndpoint != IMDSOff {
		t.Errorf("--root elsewhere must not ask IMDS: %+v", s)
	}
	t.Setenv(EnvIMDSEndpoint, "http://127.0.0.1:1")
	t.Setenv(EnvCustomData, "/tmp/cd")
	if s := sourcesFromEnv("/", hostos.AzureVM{}); s.IMDSEndpoint != "http://127.0.0.1:1" || s.CustomData != "/tmp/cd" || s.IMDSSkipped != "" {
		t.Errorf("env: %+v", s)
	}
}

// Issue 27, item 8: a host that is not an Azure VM does not ask IMDS (and
// so does not wait for it), says why, and still asks where told to.
func TestIMDSOnlyOnAzureVM(t *testing.T) {
	t.Setenv(EnvIMDSEndpoint, "")
	t.Setenv(EnvCustomData, "")
	s := sourcesFromEnv("/", hostos.AzureVM{Evidence: "/sys/class/dmi/id/chassis_asset_tag absent (no DMI)"})
	if s.IMDSEndpoint != IMDSOff || !strings.Contains(s.IMDSSkipped, "not an Azure VM: /sys/class/dmi/id/chassis_asset_tag absent") {
		t.Fatalf("off Azure: %+v", s)
	}
	s.Root = t.TempDir()
	f := s.Collect(context.Background())
	if len(f.Notes) != 2 || !strings.Contains(f.Notes[1], "IMDS userData: not queried (not an Azure VM") {
		t.Errorf("notes: %q", f.Notes)
	}
	srv, hits := fakeIMDS(t, readTestdata(t, "handwritten-usr.ign"))
	s.AskIMDS(srv.URL)
	if f := s.Collect(context.Background()); *hits != 1 || len(f.Payloads) != 1 {
		t.Errorf("an endpoint asked for by flag is asked: hits %d, %+v", *hits, f)
	}
}

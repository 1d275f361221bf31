package ignition

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// FuzzClassify feeds arbitrary customData/userData to the classifier
// preflight and `host inspect` run on whatever a VM was given. Properties:
// it never panics; the kind is one it knows; the encoding is raw or at
// most three base64/gzip layers; wrapping a payload in one more layer of
// base64 or gzip (as Azure and cloud-init users do) adds that layer to the
// encoding and changes nothing else it reports.
func FuzzClassify(f *testing.F) {
	samples, _ := filepath.Glob("testdata/*")
	for _, p := range samples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
			f.Add([]byte(base64.StdEncoding.EncodeToString(b)))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := Classify("fuzz", data)
		checkPayload(t, data, p)
		layers := 0
		if p.Encoding != "raw" {
			layers = strings.Count(p.Encoding, "+") + 1
		}
		if layers > 1 || len(bytes.TrimSpace(data)) == 0 {
			return // one more layer may reach the decoder's depth limit
		}
		b64 := Classify("fuzz", []byte(base64.StdEncoding.EncodeToString(data)))
		checkWrapped(t, data, p, b64, "base64")
		var z bytes.Buffer
		zw := gzipWriters.Get().(*gzip.Writer)
		zw.Reset(&z)
		_, _ = zw.Write(data)
		_ = zw.Close()
		gzipWriters.Put(zw)
		checkWrapped(t, data, p, Classify("fuzz", z.Bytes()), "gzip")
	})
}

// gzipWriters saves a compressor per input: making one (about a megabyte
// of state) cost more than the classification under test.
var gzipWriters = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}

var knownKinds = map[Kind]bool{KindIgnition: true, KindShellScript: true, KindCloudConfig: true, KindCloudInit: true, KindMIMEMultipart: true, KindEmpty: true, KindUnknown: true}

func checkPayload(t *testing.T, data []byte, p Payload) {
	t.Helper()
	if !knownKinds[p.Kind] {
		t.Fatalf("kind %q for %q", p.Kind, data)
	}
	if p.Source != "fuzz" || p.Bytes != len(data) {
		t.Fatalf("source %q bytes %d for %d bytes", p.Source, p.Bytes, len(data))
	}
	if p.Encoding != "raw" {
		parts := strings.Split(p.Encoding, "+")
		if len(parts) > 3 {
			t.Fatalf("encoding %q has more than 3 layers", p.Encoding)
		}
		for _, l := range parts {
			if l != "base64" && l != "gzip" {
				t.Fatalf("encoding %q", p.Encoding)
			}
		}
	}
	if p.Spec != "" && p.Kind != KindIgnition {
		t.Fatalf("spec %q on a %s payload", p.Spec, p.Kind)
	}
	if p.Describe() == "" {
		t.Fatal("empty description")
	}
}

func checkWrapped(t *testing.T, data []byte, inner, outer Payload, layer string) {
	t.Helper()
	want := layer
	if inner.Encoding != "raw" {
		want += "+" + inner.Encoding
	}
	if outer.Kind != inner.Kind || outer.Spec != inner.Spec || outer.Detail != inner.Detail || outer.Encoding != want {
		t.Fatalf("%s of %q: %s/%q/%q/%s, the payload itself: %s/%q/%q/%s", layer, data,
			outer.Kind, outer.Spec, outer.Detail, outer.Encoding, inner.Kind, inner.Spec, inner.Detail, inner.Encoding)
	}
}

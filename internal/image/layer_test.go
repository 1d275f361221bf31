package image

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func tarLayer(t *testing.T) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("kube\n")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLayerStreamVerify: the stream checks everything it carried, the
// end-of-archive padding a tar reader leaves unread included, against
// the diff ID; and IndexLayer, reading through it, reports a mismatch.
func TestLayerStreamVerify(t *testing.T) {
	l := tarLayer(t)
	good, err := l.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	bad := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}

	ls, err := OpenLayer(l, good)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(ls)
	if hdr, err := tr.Next(); err != nil || hdr.Name != "etc/hostname" {
		t.Fatalf("first entry: %v %v", hdr, err)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("end of archive: %v", err)
	}
	if err := ls.Verify(); err != nil {
		t.Fatalf("matching diff ID, padding unread by tar: %v", err)
	}
	if err := ls.Close(); err != nil {
		t.Fatalf("Close after Verify: %v", err)
	}

	ls, err = OpenLayer(l, bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Verify(); err == nil || !strings.Contains(err.Error(), "config says "+bad.String()) {
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := OpenLayer(l, v1.Hash{Algorithm: "sha512", Hex: "00"}); err == nil || !strings.Contains(err.Error(), "unsupported diff ID algorithm") {
		t.Fatalf("sha512 diff ID: %v", err)
	}

	if err := IndexLayer(NewTree(), l, bad); err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("IndexLayer with the wrong diff ID: %v", err)
	}
	if err := IndexLayer(NewTree(), l, good); err != nil {
		t.Fatalf("IndexLayer: %v", err)
	}
}

package supportbundle

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"
)

// archive writes the bundle: a tar.gz of text members under one top
// directory, every member redacted, their total size capped. It is made
// in a temp file next to the output, 0600, and renamed into place when
// complete, so there is never a partial bundle at the output path.
type archive struct {
	top      string
	pending  *renameio.PendingFile
	gz       *gzip.Writer
	tw       *tar.Writer
	now      time.Time
	maxBytes int64
	written  int64
	red      *redactor
	manifest *Manifest
}

func newArchive(output, top string, maxBytes int64, red *redactor, m *Manifest, now time.Time) (*archive, error) {
	pf, err := renameio.NewPendingFile(output, renameio.WithStaticPermissions(0o600))
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", output, err)
	}
	gz := gzip.NewWriter(pf)
	return &archive{top: top, pending: pf, gz: gz, tw: tar.NewWriter(gz), now: now, maxBytes: maxBytes, red: red, manifest: m}, nil
}

// add redacts data and writes it as member path (under the top dir),
// recording it, what it came from and whether it was cut, in the
// manifest. Past the size cap, a member keeps its end (logs matter most
// at their end) or, when nothing is left, is listed as left out.
func (a *archive) add(path, source string, data []byte) error {
	before := a.red.count
	data = a.red.redact(data)
	m := Member{Path: path, Source: source, Redactions: a.red.count - before}
	left := a.maxBytes - a.written
	if int64(len(data)) > left {
		if left < 4096 {
			a.manifest.Missing = append(a.manifest.Missing, Missing{Path: path, Reason: fmt.Sprintf("left out: the bundle reached its size cap of %d bytes", a.maxBytes)})
			return nil
		}
		m.Truncated = fmt.Sprintf("cut to its last %d of %d bytes by the size cap", left, len(data))
		data = data[int64(len(data))-left:]
	}
	m.Bytes = int64(len(data))
	if err := a.write(path, data); err != nil {
		return err
	}
	a.manifest.Members = append(a.manifest.Members, m)
	return nil
}

func (a *archive) write(path string, data []byte) error {
	hdr := &tar.Header{Name: a.top + "/" + strings.TrimPrefix(filepath.ToSlash(path), "/"), Mode: 0o600, Size: int64(len(data)),
		ModTime: a.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := a.tw.Write(data)
	a.written += int64(len(data))
	return err
}

// close writes the manifest last and puts the bundle in place; it
// returns the bundle's size.
func (a *archive) close(manifest []byte) (int64, error) {
	if err := a.write(ManifestName, manifest); err != nil {
		return 0, a.abort(err)
	}
	if err := a.tw.Close(); err != nil {
		return 0, a.abort(err)
	}
	if err := a.gz.Close(); err != nil {
		return 0, a.abort(err)
	}
	fi, err := a.pending.Stat()
	if err != nil {
		return 0, a.abort(err)
	}
	if err := a.pending.CloseAtomicallyReplace(); err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (a *archive) abort(err error) error {
	_ = a.pending.Cleanup()
	return err
}

package deb

import (
	"archive/tar"
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Control is what a .deb's control member holds: the control paragraph
// and the other files the builder reads (conffiles, md5sums, the
// maintainer scripts, by name).
type Control struct {
	Paragraph *Paragraph
	Files     map[string][]byte
}

// maxControl bounds the control member, which is read into memory.
const maxControl = 32 << 20

const arMagic = "!<arch>\n"

// ReadDeb reads a .deb (deb(5): an ar archive of debian-binary,
// control.tar[.gz|.xz|.zst] and data.tar[.gz|.xz|.zst|.bz2]) from r,
// returning its control and handing data a tar reader over the payload.
// name (the file's path or URL) is in every error.
func ReadDeb(name string, r io.Reader, data func(*tar.Reader) error) (*Control, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return nil, fmt.Errorf("%s: not a .deb (no ar header)", name)
	}
	var ctl *Control
	sawData, sawVersion := false, false
	for {
		mname, size, err := arHeader(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		member := io.LimitReader(br, size)
		switch {
		case mname == "debian-binary":
			b, _ := io.ReadAll(io.LimitReader(member, 64))
			if !strings.HasPrefix(string(b), "2.") {
				return nil, fmt.Errorf("%s: debian-binary %q: not format 2.x", name, b)
			}
			sawVersion = true
		case strings.HasPrefix(mname, "control.tar"):
			if size > maxControl {
				return nil, fmt.Errorf("%s: %s is %d bytes, more than %d", name, mname, size, maxControl)
			}
			if ctl, err = readControl(mname, member); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		case strings.HasPrefix(mname, "data.tar"):
			if ctl == nil || !sawVersion {
				return nil, fmt.Errorf("%s: %s before debian-binary and control.tar", name, mname)
			}
			dr, closeFn, err := decompress(mname, member)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, mname, err)
			}
			err = data(tar.NewReader(dr))
			closeFn()
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, mname, err)
			}
			sawData = true
		}
		// The rest of the member, and the padding to an even offset.
		if _, err := io.Copy(io.Discard, member); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if size%2 == 1 {
			if _, err := br.ReadByte(); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if ctl == nil || !sawData {
		return nil, fmt.Errorf("%s: no control.tar or data.tar member", name)
	}
	return ctl, nil
}

// arHeader reads one 60-byte ar member header: name, size.
func arHeader(r io.Reader) (string, int64, error) {
	var h [60]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return "", 0, errors.New("truncated ar header")
		}
		return "", 0, err
	}
	if h[58] != '`' || h[59] != '\n' {
		return "", 0, errors.New("bad ar member header")
	}
	name := strings.TrimRight(strings.TrimSpace(string(h[0:16])), "/")
	size, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
	if err != nil || size < 0 {
		return "", 0, fmt.Errorf("ar member %s: bad size %q", name, h[48:58])
	}
	return name, size, nil
}

// decompress opens a member by its suffix; the func releases decoder
// resources.
func decompress(member string, r io.Reader) (io.Reader, func(), error) {
	switch {
	case strings.HasSuffix(member, ".gz"):
		z, err := gzip.NewReader(r)
		return z, func() {}, err
	case strings.HasSuffix(member, ".xz"):
		z, err := xz.NewReader(r)
		return z, func() {}, err
	case strings.HasSuffix(member, ".zst"):
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, err
		}
		return z, z.Close, nil
	case strings.HasSuffix(member, ".bz2"):
		return bzip2.NewReader(r), func() {}, nil
	case strings.HasSuffix(member, ".tar"):
		return r, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown compression")
}

func readControl(member string, r io.Reader) (*Control, error) {
	dr, closeFn, err := decompress(member, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", member, err)
	}
	defer closeFn()
	tr := tar.NewReader(io.LimitReader(dr, 4*maxControl))
	ctl := &Control{Files: map[string][]byte{}}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", member, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		n := strings.TrimPrefix(strings.TrimPrefix(hdr.Name, "./"), "/")
		if strings.Contains(n, "/") || hdr.Size > maxControl {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", member, n, err)
		}
		ctl.Files[n] = b
	}
	c, ok := ctl.Files["control"]
	if !ok {
		return nil, fmt.Errorf("%s: no control file", member)
	}
	if ctl.Paragraph, err = ParseOne(member+"/control", c); err != nil {
		return nil, err
	}
	return ctl, nil
}

package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// LayerStream is a layer's uncompressed stream, hashed as it is read, so
// what was read can be checked against the diff ID the image's verified
// config lists. Whoever reads a layer (the contract check, the machine's
// unpack) reads it through one of these, and Verify is the one check.
type LayerStream struct {
	rc     io.ReadCloser
	r      io.Reader
	h      hash.Hash
	diffID v1.Hash
	closed bool
}

// OpenLayer opens l's uncompressed stream, to be checked against diffID.
func OpenLayer(l v1.Layer, diffID v1.Hash) (*LayerStream, error) {
	if diffID.Algorithm != "sha256" {
		return nil, fmt.Errorf("unsupported diff ID algorithm %q", diffID.Algorithm)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	return &LayerStream{rc: rc, r: io.TeeReader(rc, h), h: h, diffID: diffID}, nil
}

// Read reads the stream, hashing what it returns.
func (s *LayerStream) Read(p []byte) (int, error) { return s.r.Read(p) }

// Verify reads what is left of the stream and closes it, then checks
// the hash of all of it against the diff ID. A tar reader stops at the
// end-of-archive marker: the padding after it is hashed too, and a
// verifying reader underneath (a compressed layer's digest) sees EOF and
// reports on Close.
func (s *LayerStream) Verify() error {
	if _, err := io.Copy(io.Discard, s.r); err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(s.h.Sum(nil)); got != s.diffID.Hex {
		return fmt.Errorf("uncompressed content hashes to sha256:%s, config says %s", got, s.diffID)
	}
	return nil
}

// Close closes the stream; a second Close (after Verify) does nothing.
func (s *LayerStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.rc.Close()
}

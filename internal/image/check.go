package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Report is an image checked against the contract.
type Report struct {
	Ref      string    `json:"ref"`
	Digest   string    `json:"digest"`
	Platform string    `json:"platform"`
	Findings []Finding `json:"findings"`
}

// OK reports whether the image meets every item.
func (r *Report) OK() bool { return len(Misses(r.Findings)) == 0 }

// Err is nil for an image that meets the contract, else a
// *ContractError.
func (r *Report) Err() error {
	if m := Misses(r.Findings); len(m) > 0 {
		return &ContractError{Image: r.Ref, Misses: m}
	}
	return nil
}

// CheckImage reads img's config and every layer's tar headers (the
// contents are streamed and hashed, not kept: each layer is checked
// against its diff ID on the way) and checks the merged tree against the
// contract.
func CheckImage(ctx context.Context, ref string, img v1.Image) (*Report, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	t, err := IndexImage(ctx, img)
	if err != nil {
		return nil, err
	}
	plat := cf.OS + "/" + cf.Architecture
	if cf.Variant != "" {
		plat += "/" + cf.Variant
	}
	return &Report{Ref: ref, Digest: d.String(), Platform: plat, Findings: CheckContract(t)}, nil
}

// IndexImage builds the header-only tree of img's layers, whiteouts
// applied, checking each layer's uncompressed stream against the diff ID
// its config lists.
func IndexImage(ctx context.Context, img v1.Image) (*Tree, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return nil, fmt.Errorf("manifest has %d layers, config lists %d diff IDs", len(layers), len(cf.RootFS.DiffIDs))
	}
	t := NewTree()
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ld, _ := l.Digest()
		if err := IndexLayer(t, l, cf.RootFS.DiffIDs[i]); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, ld, err)
		}
	}
	return t, nil
}

// IndexLayer adds one layer's tar headers to t (whiteouts applied), checking
// the uncompressed stream against diffID.
func IndexLayer(t *Tree, l v1.Layer, diffID v1.Hash) error {
	ls, err := OpenLayer(l, diffID)
	if err != nil {
		return err
	}
	defer ls.Close()
	tr := tar.NewReader(ls)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := t.AddHeader(hdr); err != nil {
			return err
		}
	}
	return ls.Verify()
}

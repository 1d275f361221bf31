package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageMeta is what the image config says besides its layer.
type imageMeta struct {
	Title, Description, Version string
	Arch                        string
	Created                     time.Time
	Tag                         string
	CreatedBy                   string
}

// Label the builder sets on every image it writes: the image contract
// version the image was built for.
const LabelContract = "io.github.azure.aks-flex-node.worker-contract"

// writeLayout writes the OCI image layout around one layer already in
// dir/blobs/sha256: the config, the manifest, index.json (one manifest,
// tagged) and oci-layout. Every JSON has one rendering, so the same
// layer and meta give the same manifest digest.
func writeLayout(dir string, layer layerInfo, m imageMeta) (string, error) {
	created := m.Created.UTC()
	variant := ""
	if m.Arch == "arm64" {
		variant = "v8"
	}
	labels := map[string]string{
		ocispec.AnnotationTitle:   m.Title,
		ocispec.AnnotationCreated: created.Format(time.RFC3339),
		ocispec.AnnotationVersion: m.Version,
		LabelContract:             ContractVersion,
	}
	if m.Description != "" {
		labels[ocispec.AnnotationDescription] = m.Description
	}
	cfg := ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: m.Arch, OS: "linux", Variant: variant},
		Config: ocispec.ImageConfig{
			Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=oci"},
			Cmd:    []string{"/usr/lib/systemd/systemd"},
			Labels: labels,
		},
		RootFS:  ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.Digest(layer.DiffID)}},
		History: []ocispec.History{{Created: &created, CreatedBy: m.CreatedBy}},
	}
	cfgDesc, err := writeJSONBlob(dir, ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return "", err
	}
	man := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(layer.Digest), Size: layer.Size}},
	}
	manDesc, err := writeJSONBlob(dir, ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return "", err
	}
	manDesc.Platform = &ocispec.Platform{Architecture: m.Arch, OS: "linux", Variant: variant}
	manDesc.Annotations = map[string]string{ocispec.AnnotationRefName: m.Tag}
	idx := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manDesc},
	}
	if err := writeJSONFile(filepath.Join(dir, ocispec.ImageIndexFile), idx); err != nil {
		return "", err
	}
	if err := writeJSONFile(filepath.Join(dir, ocispec.ImageLayoutFile), ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion}); err != nil {
		return "", err
	}
	return manDesc.Digest.String(), nil
}

func writeJSONBlob(dir, mediaType string, v any) (ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", h), b, 0o644); err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.Digest("sha256:" + h), Size: int64(len(b))}, nil
}

func writeJSONFile(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

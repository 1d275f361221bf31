package artifact

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/Azure/aks-flex-node/internal/config"
)

// PushImage pushes the linux/arch image of the OCI layout src (a layout
// directory holding one image, or oci-layout:///dir:tag or @sha256:...)
// to dst, oci://registry/repository:tag, under the transport policy and
// with the keychain's credentials. It returns the manifest digest, which
// is what a config should pin (bootstrap.ociImage: registry/repository@digest).
func (r Registry) PushImage(ctx context.Context, src, arch, dst string) (string, error) {
	dir, want := src, ""
	if strings.HasPrefix(src, "oci-layout://") {
		var err error
		if dir, want, err = config.ParseOCILayoutRef(src); err != nil {
			return "", err
		}
	}
	img, _, err := pickImage(dir, want, arch)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	ref, err := r.ParseReference(dst)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, r.options(ctx, ref)...); err != nil {
		return "", fmt.Errorf("push %s to %s: %w", src, ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

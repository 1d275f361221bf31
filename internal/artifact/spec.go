package artifact

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/strictjson"
)

// Spec is the input of `artifacts build`: what one bundle holds. Its
// format is documented in docs/offline-bundle.md.
type Spec struct {
	SchemaVersion int        `json:"schemaVersion"`
	Arch          string     `json:"arch,omitempty"`
	Components    Components `json:"components"`
	Images        []Image    `json:"images,omitempty"`
}

var (
	specVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$`) })
	archRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(amd64|arm64)$`) })
	imageRefRE    = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$`)
	})
)

// LoadSpec reads and validates a build spec strictly: unknown fields are
// errors, and every problem names its JSON path.
func LoadSpec(p string) (*Spec, error) {
	data, err := fsutil.ReadRegular(p, maxManifest)
	if err != nil {
		return nil, err
	}
	return ParseSpec(p, data)
}

// ParseSpec is LoadSpec on bytes; name is where they came from.
func ParseSpec(name string, data []byte) (*Spec, error) {
	return strictjson.DecodeSpec(name, data, SchemaVersion, func(s *Spec) int { return s.SchemaVersion }, checkSpec)
}

// checkSpec reports what is wrong with a decoded spec.
func checkSpec(s *Spec, bad strictjson.Bad) {
	if s.Arch != "" && !archRE().MatchString(s.Arch) {
		bad("arch", "%q is not amd64 or arm64", s.Arch)
	}
	for _, c := range []struct {
		field, v string
		required bool
	}{
		{"components.kubernetes", s.Components.Kubernetes, true},
		{"components.containerd", s.Components.Containerd, true},
		{"components.runc", s.Components.Runc, true},
		{"components.cni", s.Components.CNI, true},
		{"components.crictl", s.Components.Crictl, false},
	} {
		switch {
		case c.v == "" && c.required:
			bad(c.field, "is required")
		case c.v != "" && !specVersionRE().MatchString(c.v):
			bad(c.field, "%q is not a version like 1.2.3 (no leading v)", c.v)
		}
	}
	seen := map[string]bool{}
	for i, im := range s.Images {
		field := fmt.Sprintf("images[%d]", i)
		if err := validRel(im.Path); err != nil {
			bad(field+".path", "%v", err)
		} else if !strings.HasPrefix(im.Path, "images/") || !strings.HasSuffix(im.Path, ".tar") || strings.Count(im.Path, "/") != 1 {
			bad(field+".path", "%q must be images/<name>.tar", im.Path)
		} else if seen[im.Path] {
			bad(field+".path", "%q is listed twice", im.Path)
		}
		seen[im.Path] = true
		if !imageRefRE().MatchString(im.Ref) {
			bad(field+".ref", "%q is not an image reference like registry.k8s.io/pause:3.10", im.Ref)
		}
	}
}

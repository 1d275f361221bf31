package image

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/Azure/aks-flex-node/internal/strictjson"
)

// SpecSchemaVersion is the image spec schema this package reads.
const SpecSchemaVersion = 1

// Spec is the input of `image build`: which archive, which packages, and
// what the builder does to the tree besides unpacking them. Its format is
// in docs/guide/worker-images.md; examples/worker-image/bookworm.json is
// the default worker image's.
type Spec struct {
	SchemaVersion int    `json:"schemaVersion"`
	Name          string `json:"name"`
	Description   string `json:"description,omitempty"`
	// Tag names the image in the output layout (the ref.name annotation,
	// what follows ':' in oci-layout:///dir:tag); default "worker".
	Tag string `json:"tag,omitempty"`
	// Distribution is debian or ubuntu: it picks the default keyring.
	Distribution string   `json:"distribution"`
	Suite        string   `json:"suite"`
	Components   []string `json:"components"`
	// MaxReleaseAgeDays bounds the age of the suite's signed Release when
	// it sets no Valid-Until; 0 is two years. A suite frozen on purpose
	// (an Ubuntu release pocket) needs more.
	MaxReleaseAgeDays int `json:"maxReleaseAgeDays,omitempty"`
	// Mirror is the archive root; empty means --mirror must give one (no
	// mirror host is written into this repository).
	Mirror string `json:"mirror,omitempty"`
	// Keyring is an OpenPGP keyring file (binary or armored), relative to
	// the spec's directory; empty means the distribution's archive
	// keyring as its keyring package installs it on the build machine.
	Keyring  string   `json:"keyring,omitempty"`
	Arch     string   `json:"arch,omitempty"`
	Packages []string `json:"packages"`
	// Exclude drops paths matching these globs (path.Match, on the path
	// in the image) from the payload; Keep wins over Exclude.
	Exclude []string `json:"exclude,omitempty"`
	Keep    []string `json:"keep,omitempty"`
	// Alternatives picks an alternative's target where the highest
	// priority one is not wanted: name -> path.
	Alternatives map[string]string `json:"alternatives,omitempty"`
	// MaskUnits are systemd units linked to /dev/null.
	MaskUnits []string `json:"maskUnits,omitempty"`
	// DefaultTarget is the systemd target the machine boots into;
	// default multi-user.target.
	DefaultTarget string `json:"defaultTarget,omitempty"`
}

// Default keyrings: where debian-archive-keyring and
// ubuntu-keyring install the archive keys on a build machine.
var defaultKeyrings = map[string]string{
	"debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
	"ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
}

var (
	pkgNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[0-9A-Za-z.+~:-]+)?$`) })
	suiteRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })
	unitRE    = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z0-9:_.\\@-]+\.(service|socket|target|timer|path|mount|automount|swap|slice|scope|device)$`)
	})
	tagRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`) })
	archRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(amd64|arm64)$`) })
)

// LoadSpec reads and validates a spec strictly: unknown fields are
// errors, and every problem names its JSON path.
func LoadSpec(p string) (*Spec, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	s, err := ParseSpec(p, data)
	if err != nil {
		return nil, err
	}
	if s.Keyring != "" && !filepath.IsAbs(s.Keyring) {
		s.Keyring = filepath.Join(filepath.Dir(p), s.Keyring)
	}
	return s, nil
}

// ParseSpec is LoadSpec on bytes; name says where they came from.
func ParseSpec(name string, data []byte) (*Spec, error) {
	return strictjson.DecodeSpec(name, data, SpecSchemaVersion, func(s *Spec) int { return s.SchemaVersion }, checkSpec)
}

// checkSpec reports what is wrong with a decoded spec.
func checkSpec(s *Spec, bad strictjson.Bad) {
	if strings.TrimSpace(s.Name) == "" {
		bad("name", "is required")
	}
	if s.Tag != "" && !tagRE().MatchString(s.Tag) {
		bad("tag", "%q is not an OCI tag", s.Tag)
	}
	if _, ok := defaultKeyrings[s.Distribution]; !ok {
		bad("distribution", "%q is not debian or ubuntu", s.Distribution)
	}
	if !suiteRE().MatchString(s.Suite) {
		bad("suite", "%q is not a suite name like bookworm", s.Suite)
	}
	if s.MaxReleaseAgeDays < 0 {
		bad("maxReleaseAgeDays", "%d is negative (0 is the default, two years)", s.MaxReleaseAgeDays)
	}
	if len(s.Components) == 0 {
		bad("components", "is required (e.g. [\"main\"])")
	}
	for i, c := range s.Components {
		if !suiteRE().MatchString(c) {
			bad(fmt.Sprintf("components[%d]", i), "%q is not a component name", c)
		}
	}
	if s.Mirror != "" && !strings.HasPrefix(s.Mirror, "https://") && !strings.HasPrefix(s.Mirror, "http://") {
		bad("mirror", "%q is not an http(s) URL", s.Mirror)
	}
	if s.Arch != "" && !archRE().MatchString(s.Arch) {
		bad("arch", "%q is not amd64 or arm64", s.Arch)
	}
	if len(s.Packages) == 0 {
		bad("packages", "is required")
	}
	for i, p := range s.Packages {
		if !pkgNameRE().MatchString(p) {
			bad(fmt.Sprintf("packages[%d]", i), "%q is not a package name (or name=version)", p)
		}
	}
	for field, globs := range map[string][]string{"exclude": s.Exclude, "keep": s.Keep} {
		for i, g := range globs {
			if _, err := path.Match(g, "/"); err != nil || !strings.HasPrefix(g, "/") {
				bad(fmt.Sprintf("%s[%d]", field, i), "%q is not an absolute path glob", g)
			}
		}
	}
	for n, p := range s.Alternatives {
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			bad("alternatives."+n, "%q is not an absolute clean path", p)
		}
	}
	for i, u := range s.MaskUnits {
		if !unitRE().MatchString(u) {
			bad(fmt.Sprintf("maskUnits[%d]", i), "%q is not a unit name", u)
		}
	}
	if s.DefaultTarget != "" && !strings.HasSuffix(s.DefaultTarget, ".target") {
		bad("defaultTarget", "%q is not a .target unit", s.DefaultTarget)
	}
}

// tag is the ref.name the image gets in its layout.
func (s *Spec) tag() string {
	if s.Tag != "" {
		return s.Tag
	}
	return "worker"
}

// keyring is the keyring file to verify the archive with.
func (s *Spec) keyring() string {
	if s.Keyring != "" {
		return s.Keyring
	}
	return defaultKeyrings[s.Distribution]
}

func (s *Spec) defaultTarget() string {
	if s.DefaultTarget != "" {
		return s.DefaultTarget
	}
	return "multi-user.target"
}

// excluded reports whether the spec drops path p from the image: p or a
// directory above it matches an exclude glob, and p matches no keep glob
// (a kept file brings its directories along).
func (s *Spec) excluded(p string) bool {
	for _, g := range s.Keep {
		if ok, _ := path.Match(g, p); ok {
			return false
		}
	}
	for q := p; q != "/" && q != "."; q = path.Dir(q) {
		for _, g := range s.Exclude {
			if ok, _ := path.Match(g, q); ok {
				return true
			}
		}
	}
	return false
}

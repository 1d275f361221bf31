// Package ignition owns everything this agent knows about Ignition, the
// first-boot provisioner of Azure Container Linux, Flatcar and Fedora CoreOS:
// rendering a config that installs and joins the agent on first boot (built
// with Ignition's own config types and checked with its validator), checking
// any config, and recognising the provisioning payloads a host received
// (Azure customData, IMDS userData) so that an Ignition config a host will
// never act on is an error instead of a host that silently never joins.
package ignition

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	v33 "github.com/coreos/ignition/v2/config/v3_3"
	t33 "github.com/coreos/ignition/v2/config/v3_3/types"
	v34 "github.com/coreos/ignition/v2/config/v3_4"
	tr34 "github.com/coreos/ignition/v2/config/v3_4/translate"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

// Spec versions Render produces. 3.3.0 is the default because it is the
// newest spec every Ignition from 2.14 on accepts as stable (Debian 12's
// ignition 2.14.0 rejects 3.4.0 as "unsupported config version" and only
// knows 3.4.0-experimental), and it has everything the rendered config uses:
// data URLs with gzip compression, verification hashes, units and links.
const (
	Spec33      = "3.3.0"
	Spec34      = "3.4.0"
	DefaultSpec = Spec33
)

// Specs are the spec versions Render accepts, oldest first.
var Specs = []string{Spec33, Spec34}

// Targets: what kind of host the config is for. On ACL /usr is read-only, so
// Render refuses any layout that would put a file there.
const (
	TargetACL     = "acl"
	TargetGeneric = "generic"
)

// Options say what to render.
type Options struct {
	// Spec is one of Specs; empty means DefaultSpec.
	Spec string
	// Target is TargetACL (the default when empty) or TargetGeneric.
	Target string
	// Config is the parsed agent config (it decides the layout) and
	// ConfigData the file's bytes, embedded as they are: what lands on the
	// host is the file the user validated, not a re-encoding of it.
	// ConfigFile names the file in messages.
	Config     *config.Config
	ConfigData []byte
	ConfigFile string
	// The agent binary comes either from BinaryURL, verified against
	// BinarySHA256 (hex) by Ignition, or embedded from Binary (gzip
	// compressed in a data URL, its SHA-256 verified by Ignition too).
	BinaryURL    string
	BinarySHA256 string
	Binary       []byte
}

// Rendered is a rendered config.
type Rendered struct {
	Spec   string
	JSON   []byte
	Layout layout.Layout
	// BinaryEncodedBytes is the size of the binary's data URL when the
	// binary is embedded (0 with a URL): what it adds to customData.
	BinaryEncodedBytes int
}

// InputError is a refusal caused by the input (the CLI exits 2 for it).
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

// IsInputError reports whether err is (or wraps) an InputError.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

func invalidf(format string, args ...any) error {
	return &InputError{msg: fmt.Sprintf(format, args...)}
}

// Render builds the Ignition config: the agent config at the layout's config
// file (0600, root), the agent binary at the layout's agentBinary (0755), and
// the first-boot unit, enabled. It writes nothing under /usr for TargetACL
// and refuses a layout that would.
func Render(o Options) (*Rendered, error) {
	spec := o.Spec
	if spec == "" {
		spec = DefaultSpec
	}
	if spec != Spec33 && spec != Spec34 {
		return nil, invalidf("--spec %q: supported Ignition spec versions are %s", o.Spec, strings.Join(Specs, ", "))
	}
	target := o.Target
	if target == "" {
		target = TargetACL
	}
	if target != TargetACL && target != TargetGeneric {
		return nil, invalidf("--target %q: must be %s or %s", o.Target, TargetACL, TargetGeneric)
	}
	if o.Config == nil || len(o.ConfigData) == 0 {
		return nil, invalidf("no agent config to embed")
	}
	l, err := layout.New("/", o.Config.Agent.HostPrefix, o.Config.Agent.LogDir)
	if err != nil {
		return nil, invalidf("agent.hostPrefix in %s: %v", o.ConfigFile, err)
	}
	if target == TargetACL {
		if err := checkACLLayout(l, o.ConfigFile); err != nil {
			return nil, err
		}
	}

	bin, encoded, err := binaryContents(o)
	if err != nil {
		return nil, err
	}
	unit, err := systemd.FirstBootUnit(l)
	if err != nil {
		return nil, err
	}

	cfg := t33.Config{Ignition: t33.Ignition{Version: Spec33}}
	root := 0
	yes := true
	cfg.Storage.Files = []t33.File{
		{
			Node: t33.Node{Path: l.ConfigFile(), Overwrite: &yes, User: t33.NodeUser{ID: &root}, Group: t33.NodeGroup{ID: &root}},
			FileEmbedded1: t33.FileEmbedded1{
				// The config carries the bootstrap token: root only.
				Mode:     intp(0o600),
				Contents: t33.Resource{Source: strp(dataURL(o.ConfigData))},
			},
		},
		{
			Node:          t33.Node{Path: l.AgentBinary(), Overwrite: &yes, User: t33.NodeUser{ID: &root}, Group: t33.NodeGroup{ID: &root}},
			FileEmbedded1: t33.FileEmbedded1{Mode: intp(0o755), Contents: bin},
		},
	}
	cfg.Systemd.Units = []t33.Unit{{
		Name:     layout.FirstBootUnitName,
		Contents: &unit,
		// Ignition enables through a preset, which systemd applies on
		// the host's first boot (/etc/machine-id absent or
		// "uninitialized"): that is the boot Ignition provisions.
		Enabled: &yes,
	}}

	var raw []byte
	switch spec {
	case Spec33:
		raw, err = json.Marshal(cfg)
		if err == nil {
			_, rpt, perr := v33.Parse(raw)
			err = parseError(perr, rpt.String())
		}
	case Spec34:
		c34 := tr34.Translate(cfg)
		raw, err = json.Marshal(c34)
		if err == nil {
			_, rpt, perr := v34.Parse(raw)
			err = parseError(perr, rpt.String())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("render Ignition %s: %w", spec, err)
	}
	return &Rendered{Spec: spec, JSON: raw, Layout: l, BinaryEncodedBytes: encoded}, nil
}

func parseError(err error, report string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the Ignition validator rejected the rendered config: %w\n%s", err, report)
}

// checkACLLayout refuses a layout with any path under /usr: on ACL it is
// read-only, and Ignition would fail on first boot with nobody watching.
func checkACLLayout(l layout.Layout, configFile string) error {
	if l.Prefix() == "" {
		return invalidf("agent.hostPrefix is empty in %s: the classic layout puts the agent at %s, and /usr is read-only on Azure Container Linux; set agent.hostPrefix (for example %s), or render with --target %s for a host with a writable /usr",
			configFile, l.AgentBinary(), layout.SuggestedPrefix, TargetGeneric)
	}
	if underUsr(l.Prefix()) {
		return invalidf("agent.hostPrefix %s in %s is under /usr, which is read-only on Azure Container Linux; choose a directory outside /usr (for example %s)", l.Prefix(), configFile, layout.SuggestedPrefix)
	}
	keys := l.Keys()
	for _, k := range layout.KeyOrder {
		if underUsr(keys[k]) {
			field := "agent.hostPrefix"
			if k == "logDir" {
				field = "agent.logDir"
			}
			return invalidf("%s in %s puts %s at %s, under /usr, which is read-only on Azure Container Linux; choose a directory outside /usr (for example %s)",
				field, configFile, k, keys[k], layout.SuggestedPrefix)
		}
	}
	return nil
}

func underUsr(p string) bool {
	p = path.Clean(p)
	return p == "/usr" || strings.HasPrefix(p, "/usr/")
}

// binaryContents is the Ignition resource for the agent binary.
func binaryContents(o Options) (t33.Resource, int, error) {
	switch {
	case o.BinaryURL != "" && o.Binary != nil:
		return t33.Resource{}, 0, invalidf("give the agent binary either as a URL (--binary-url) or as a file (--binary), not both")
	case o.BinaryURL != "":
		u, err := url.Parse(o.BinaryURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return t33.Resource{}, 0, invalidf("--binary-url %q: must be an http(s) URL with a host", o.BinaryURL)
		}
		sum := strings.ToLower(strings.TrimSpace(o.BinarySHA256))
		if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
			return t33.Resource{}, 0, invalidf("--binary-sha256 %q: a URL needs the SHA-256 of the binary as 64 hex digits, so Ignition verifies what it downloads", o.BinarySHA256)
		}
		return t33.Resource{Source: strp(o.BinaryURL), Verification: t33.Verification{Hash: strp("sha256-" + sum)}}, 0, nil
	case o.Binary != nil:
		if len(o.Binary) == 0 {
			return t33.Resource{}, 0, invalidf("--binary: the file is empty")
		}
		// Anything else (a tarball, a script, a download error page) would
		// render fine and fail only at first boot, with nobody watching.
		if !bytes.HasPrefix(o.Binary, []byte("\x7fELF")) {
			head := o.Binary[:min(len(o.Binary), 8)]
			return t33.Resource{}, 0, invalidf("--binary: not an ELF executable (it starts with %q); give the aks-flex-node binary built for the target host", head)
		}
		if o.BinarySHA256 != "" {
			return t33.Resource{}, 0, invalidf("--binary-sha256 goes with --binary-url; an embedded binary is hashed here")
		}
		var gz bytes.Buffer
		// Default, not best, compression: measured on a Go binary, best
		// took 2.5x as long for an output 0.3% smaller (BenchmarkRenderEmbedded).
		w, _ := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
		if _, err := w.Write(o.Binary); err != nil {
			return t33.Resource{}, 0, err
		}
		if err := w.Close(); err != nil {
			return t33.Resource{}, 0, err
		}
		sum := sha256.Sum256(o.Binary)
		src := dataURL(gz.Bytes())
		// The hash describes the decompressed file (Ignition spec 3.x).
		return t33.Resource{Source: &src, Compression: strp("gzip"), Verification: t33.Verification{Hash: strp("sha256-" + hex.EncodeToString(sum[:]))}}, len(src), nil
	default:
		return t33.Resource{}, 0, invalidf("no agent binary: give --binary-url with --binary-sha256, or --binary PATH")
	}
}

func dataURL(b []byte) string {
	return "data:;base64," + base64.StdEncoding.EncodeToString(b)
}

func intp(i int) *int       { return &i }
func strp(s string) *string { return &s }

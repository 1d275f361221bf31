package ignition

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/hostos"
)

// Where provisioning payloads come from on Azure. The Linux agent (waagent)
// writes the VM's customData to DefaultCustomDataPath: base64 as delivered
// by older agents, decoded by newer ones, so both are read. IMDS serves the
// VM's userData, base64, from DefaultIMDSEndpoint + imdsUserDataPath with the
// header "Metadata: true" (without it IMDS answers 400).
const (
	DefaultCustomDataPath = "/var/lib/waagent/CustomData"
	DefaultIMDSEndpoint   = "http://169.254.169.254"
	imdsUserDataPath      = "/metadata/instance/compute/userData?api-version=2021-01-01&format=text"

	// EnvCustomData and EnvIMDSEndpoint override the defaults for the CLI
	// (tests point them at files and a fake IMDS; "off" disables IMDS).
	EnvCustomData   = "AKS_FLEX_NODE_CUSTOM_DATA"
	EnvIMDSEndpoint = "AKS_FLEX_NODE_IMDS_ENDPOINT"
	// IMDSOff disables the IMDS query.
	IMDSOff = "off"

	// maxPayload bounds what is read or decompressed: Azure caps customData
	// and userData at 64 KiB encoded; anything far beyond is not a payload.
	maxPayload = 16 << 20
)

// Kind is what a payload is.
type Kind string

const (
	KindIgnition      Kind = "ignition"
	KindShellScript   Kind = "shell-script"
	KindCloudConfig   Kind = "cloud-config"
	KindCloudInit     Kind = "cloud-init" // other cloud-init formats (#include, #cloud-boothook, ...)
	KindMIMEMultipart Kind = "mime-multipart"
	KindEmpty         Kind = "empty"
	KindUnknown       Kind = "unknown"
)

// Payload is one classified provisioning payload. The payload itself may
// carry secrets and is kept out of JSON.
type Payload struct {
	Source   string `json:"source"` // a file path, or "IMDS userData (<url>)"
	Kind     Kind   `json:"kind"`
	Encoding string `json:"encoding"` // raw, base64, gzip, base64+gzip
	Spec     string `json:"spec,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Bytes    int    `json:"bytes"`
	data     []byte
}

// Describe is the payload in a few words: "Ignition config (spec 3.3.0, base64)".
func (p Payload) Describe() string {
	var what string
	switch p.Kind {
	case KindIgnition:
		what = "Ignition config (spec " + orUnknown(p.Spec) + ")"
	case KindShellScript:
		what = "shell script"
	case KindCloudConfig:
		what = "cloud-config"
	case KindCloudInit:
		what = "cloud-init data"
	case KindMIMEMultipart:
		what = "MIME multipart (cloud-init)"
	case KindEmpty:
		return "empty"
	default:
		what = "unrecognised data"
	}
	extra := []string{}
	if p.Detail != "" {
		extra = append(extra, p.Detail)
	}
	if p.Encoding != "raw" {
		extra = append(extra, p.Encoding)
	}
	if len(extra) > 0 {
		what += " [" + strings.Join(extra, ", ") + "]"
	}
	return what
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Classify says what data is, looking through base64 and gzip.
func Classify(source string, data []byte) Payload {
	p := classify(data, nil)
	p.Source = source
	p.Bytes = len(data)
	return p
}

func classify(data []byte, layers []string) Payload {
	enc := "raw"
	if len(layers) > 0 {
		enc = strings.Join(layers, "+")
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Payload{Kind: KindEmpty, Encoding: enc}
	}
	if len(layers) < 3 {
		if bytes.HasPrefix(trimmed, []byte{0x1f, 0x8b}) {
			out, err := gunzip(trimmed)
			if err != nil {
				return Payload{Kind: KindUnknown, Encoding: enc, Detail: "gzip that does not decompress: " + err.Error()}
			}
			return classify(out, append(layers, "gzip"))
		}
		if dec, ok := decodeBase64(trimmed); ok {
			return classify(dec, append(layers, "base64"))
		}
	}
	p := Payload{Encoding: enc, data: trimmed, Kind: KindUnknown}
	first, _, _ := bytes.Cut(trimmed, []byte("\n"))
	first = bytes.TrimSpace(first)
	switch {
	case trimmed[0] == '{':
		var c looseConfig
		var probe map[string]json.RawMessage
		if json.Unmarshal(trimmed, &probe) != nil {
			p.Detail = "text starting with '{' that is not JSON"
			return p
		}
		if _, ok := probe["ignition"]; !ok || json.Unmarshal(trimmed, &c) != nil {
			p.Detail = "JSON without ignition.version"
			return p
		}
		p.Kind, p.Spec = KindIgnition, c.Ignition.Version
	case bytes.HasPrefix(first, []byte("#!")):
		p.Kind, p.Detail = KindShellScript, string(first)
	case bytes.Equal(first, []byte("#cloud-config")):
		p.Kind = KindCloudConfig
	case bytes.HasPrefix(first, []byte("#include")), bytes.HasPrefix(first, []byte("#cloud-")),
		bytes.HasPrefix(first, []byte("#part-handler")), bytes.HasPrefix(first, []byte("## template: jinja")):
		p.Kind, p.Detail = KindCloudInit, string(first)
	case isMIME(trimmed):
		p.Kind = KindMIMEMultipart
	}
	return p
}

func isMIME(b []byte) bool {
	head := strings.ToLower(string(b[:min(len(b), 1024)]))
	return strings.HasPrefix(head, "mime-version:") || strings.HasPrefix(head, "content-type: multipart/") ||
		strings.Contains(head, "\ncontent-type: multipart/")
}

// decodeBase64 decodes b when it is nothing but base64 (line breaks
// allowed), as customData is on the wire.
func decodeBase64(b []byte) ([]byte, bool) {
	clean := make([]byte, 0, len(b))
	for _, c := range b {
		switch {
		case c == '\n' || c == '\r' || c == ' ' || c == '\t':
			continue
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
			clean = append(clean, c)
		default:
			return nil, false
		}
	}
	if len(clean) < 4 || len(clean)%4 != 0 {
		return nil, false
	}
	out, err := base64.StdEncoding.DecodeString(string(clean))
	if err != nil || len(out) == 0 {
		return nil, false
	}
	return out, true
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(r, maxPayload+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxPayload {
		return nil, fmt.Errorf("decompresses to more than %d bytes", maxPayload)
	}
	return out, nil
}

// Sources say where to look for payloads.
type Sources struct {
	// Root is the host's "/" ("" means "/").
	Root string
	// CustomData is the host path of the customData file;
	// "" means DefaultCustomDataPath.
	CustomData string
	// IMDSEndpoint is the IMDS base URL. "" or IMDSOff skips IMDS: library
	// callers opt in (the CLI passes DefaultIMDSEndpoint), so no test of
	// this package or its callers reaches a real metadata service.
	IMDSEndpoint string
	// Client is used for IMDS; nil means a client with a 2 s timeout and
	// no proxy (IMDS must never be asked through one).
	Client *http.Client
	// IMDSSkipped says why IMDS is not asked although nobody turned it
	// off: the host is not an Azure VM. Collect's note and preflight's
	// line carry it.
	IMDSSkipped string
}

// SourcesFromEnv applies EnvCustomData and EnvIMDSEndpoint over the Azure
// defaults; the CLI's flags then override these. IMDS is asked by default
// only on an Azure VM (hostos.DetectAzureVM, read locally): elsewhere the
// link-local address answers nothing and the query would wait out its
// timeout on every run. An endpoint set in the environment is asked as set.
func SourcesFromEnv(root string) Sources {
	return sourcesFromEnv(root, hostos.DetectAzureVM("/"))
}

func sourcesFromEnv(root string, vm hostos.AzureVM) Sources {
	s := Sources{Root: root, CustomData: DefaultCustomDataPath, IMDSEndpoint: DefaultIMDSEndpoint}
	if v := os.Getenv(EnvCustomData); v != "" {
		s.CustomData = v
	}
	if v := os.Getenv(EnvIMDSEndpoint); v != "" {
		s.IMDSEndpoint = v
	}
	if root != "" && root != "/" && os.Getenv(EnvIMDSEndpoint) == "" {
		// IMDS describes the running VM, not a tree under --root.
		s.IMDSEndpoint = IMDSOff
	}
	if s.IMDSEndpoint == DefaultIMDSEndpoint && !vm.Azure {
		s.IMDSEndpoint, s.IMDSSkipped = IMDSOff, "not an Azure VM: "+vm.Evidence
	}
	return s
}

// AskIMDS makes Collect ask IMDS at endpoint, as a flag that names one
// asks for, whatever the host looks like.
func (s *Sources) AskIMDS(endpoint string) {
	s.IMDSEndpoint, s.IMDSSkipped = endpoint, ""
}

// Found is what Collect found.
type Found struct {
	Payloads []Payload `json:"payloads"`
	// Notes say what was looked at and not found, or could not be read.
	Notes []string `json:"notes"`
}

// Collect reads the customData file and asks IMDS for userData.
func (s Sources) Collect(ctx context.Context) Found {
	f := Found{Payloads: []Payload{}, Notes: []string{}}
	cd := s.CustomData
	if cd == "" {
		cd = DefaultCustomDataPath
	}
	root := s.Root
	if root == "" {
		root = "/"
	}
	data, err := readBounded(filepath.Join(root, cd))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.Notes = append(f.Notes, "customData: "+cd+" absent")
	case err != nil:
		f.Notes = append(f.Notes, fmt.Sprintf("customData: %s unreadable: %v", cd, err))
	default:
		f.Payloads = append(f.Payloads, Classify(cd, data))
	}

	if s.IMDSSkipped != "" {
		f.Notes = append(f.Notes, "IMDS userData: not queried ("+s.IMDSSkipped+")")
		return f
	}
	if s.IMDSEndpoint == "" || s.IMDSEndpoint == IMDSOff {
		f.Notes = append(f.Notes, "IMDS userData: not queried (disabled)")
		return f
	}
	u := strings.TrimRight(s.IMDSEndpoint, "/") + imdsUserDataPath
	body, err := s.fetchUserData(ctx, u)
	switch {
	case err != nil:
		f.Notes = append(f.Notes, fmt.Sprintf("IMDS userData: not reachable at %s: %v", s.IMDSEndpoint, err))
	case len(bytes.TrimSpace(body)) == 0:
		f.Notes = append(f.Notes, "IMDS userData: empty")
	default:
		raw, derr := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(body)))
		if derr != nil {
			f.Notes = append(f.Notes, fmt.Sprintf("IMDS userData: the body is not base64 as IMDS serves it: %v", derr))
			break
		}
		p := Classify("IMDS userData ("+s.IMDSEndpoint+")", raw)
		// IMDS always base64-encodes; say so, so the two sources read alike.
		if p.Encoding == "raw" {
			p.Encoding = "base64"
		} else {
			p.Encoding = "base64+" + p.Encoding
		}
		f.Payloads = append(f.Payloads, p)
	}
	return f
}

func readBounded(p string) ([]byte, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxPayload+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPayload {
		return nil, fmt.Errorf("larger than %d bytes", maxPayload)
	}
	return b, nil
}

func (s Sources) fetchUserData(ctx context.Context, u string) ([]byte, error) {
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata", "true")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPayload))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	return body, nil
}

// RunsIgnition reports whether hosts of a family are provisioned by Ignition
// at first boot.
func RunsIgnition(f hostos.Family) bool {
	return f == hostos.FamilyACL || f == hostos.FamilyFlatcar || f == hostos.FamilyFedoraCoreOS
}

// Problem is something wrong with a payload on this host.
type Problem struct {
	Severity string `json:"severity"` // error or warning
	Source   string `json:"source"`
	Message  string `json:"message"`
	Remedy   string `json:"remedy"`
}

// Assess judges payloads for a host of family fam.
func Assess(payloads []Payload, fam hostos.Family) []Problem {
	out := []Problem{}
	for _, p := range payloads {
		switch p.Kind {
		case KindIgnition:
			switch {
			case fam == hostos.FamilyUnknown:
				out = append(out, Problem{Severity: "warning", Source: p.Source,
					Message: fmt.Sprintf("%s holds an Ignition config (spec %s), and this host's distribution is unknown: unless it runs Ignition at first boot, the config is never applied", p.Source, orUnknown(p.Spec)),
					Remedy:  "boot an image that runs Ignition (Azure Container Linux, Flatcar), or provision with a shell script or cloud-config"})
			case !RunsIgnition(fam):
				out = append(out, Problem{Severity: "error", Source: p.Source,
					Message: fmt.Sprintf("%s holds an Ignition config (spec %s), but this host (family %s) does not run Ignition: the config is never applied, so the host never joins", p.Source, orUnknown(p.Spec), fam),
					Remedy:  "boot an image that runs Ignition (Azure Container Linux, Flatcar) for this config, or give this host a shell script or cloud-config that runs install.sh and `aks-flex-node start`"})
			default:
				res := Check(p.Source, p.data)
				for _, e := range res.Entries {
					if e.Severity != "error" {
						continue
					}
					out = append(out, Problem{Severity: "error", Source: p.Source,
						Message: fmt.Sprintf("%s: Ignition config (spec %s) %s", p.Source, orUnknown(p.Spec), e),
						Remedy:  "render the config with `aks-flex-node ignition render` (agent.hostPrefix set, nothing under /usr) and check it with `aks-flex-node ignition check`"})
				}
			}
		case KindShellScript, KindCloudConfig, KindCloudInit, KindMIMEMultipart:
			if RunsIgnition(fam) {
				out = append(out, Problem{Severity: "warning", Source: p.Source,
					Message: fmt.Sprintf("%s is a %s, but this host (family %s) is provisioned by Ignition, which does not run it", p.Source, p.Describe(), fam),
					Remedy:  "provision this host with an Ignition config: `aks-flex-node ignition render`"})
			}
		}
	}
	return out
}

// Provisioning is what a host received to provision it, and what is wrong
// with that on this host.
type Provisioning struct {
	Found
	Problems []Problem `json:"problems"`
}

// Inspect collects the payloads and assesses them for family fam.
func Inspect(ctx context.Context, s Sources, fam hostos.Family) Provisioning {
	f := s.Collect(ctx)
	return Provisioning{Found: f, Problems: Assess(f.Payloads, fam)}
}

// Errors counts error-level problems.
func (p Provisioning) Errors() int {
	n := 0
	for _, pr := range p.Problems {
		if pr.Severity == "error" {
			n++
		}
	}
	return n
}

// WriteText prints the provisioning section of `host inspect`.
func (p Provisioning) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("provisioning payloads:\n")
	if len(p.Payloads) == 0 {
		b.WriteString("  none found\n")
	}
	for _, pl := range p.Payloads {
		fmt.Fprintf(&b, "  %s: %s, %d bytes\n", pl.Source, pl.Describe(), pl.Bytes)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(&b, "  %s: %s\n    %s\n", strings.ToUpper(pr.Severity), pr.Message, pr.Remedy)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

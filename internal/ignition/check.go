package ignition

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	ignconfig "github.com/coreos/ignition/v2/config"
	ignerrors "github.com/coreos/ignition/v2/config/shared/errors"
	"github.com/coreos/ignition/v2/config/util"
	"github.com/coreos/vcontext/report"

	"github.com/Azure/aks-flex-node/internal/layout"
)

// Entry is one finding about a config, at a JSON path ("$.storage.files.0.path").
type Entry struct {
	Severity string `json:"severity"` // error, warning, info
	Path     string `json:"path,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Message  string `json:"message"`
}

func (e Entry) String() string {
	at := ""
	if e.Path != "" {
		at = " at " + e.Path
	}
	if e.Line > 0 {
		at += fmt.Sprintf(" (line %d col %d)", e.Line, e.Column)
	}
	return e.Severity + at + ": " + e.Message
}

// CheckResult is what Check found in one config.
type CheckResult struct {
	File    string  `json:"file"`
	Spec    string  `json:"spec"`
	Valid   bool    `json:"valid"`
	Entries []Entry `json:"entries"`
}

// Check validates raw with Ignition's own parser and validator (any 3.x
// spec this library knows), then adds this agent's own finding: a config
// that installs aks-flex-node with paths under /usr cannot work on ACL.
func Check(file string, raw []byte) CheckResult {
	res := CheckResult{File: file, Entries: []Entry{}}
	if v, _, err := util.GetConfigVersion(raw); err == nil {
		res.Spec = v.String()
	} else if s := looseVersion(raw); s != "" {
		res.Spec = s
	}
	_, rpt, err := ignconfig.Parse(raw)
	res.Entries = append(res.Entries, entries(rpt)...)
	if err != nil {
		res.Entries = append(res.Entries, Entry{Severity: "error", Message: parseErrorMessage(err, res.Spec)})
	}
	for _, u := range UsrPaths(raw) {
		res.Entries = append(res.Entries, Entry{Severity: "error", Path: u.JSONPath,
			Message: fmt.Sprintf("%s is under /usr, which is read-only on Azure Container Linux, in a config that installs aks-flex-node; set agent.hostPrefix (for example %s) and render the config with `aks-flex-node ignition render`", u.Path, layout.SuggestedPrefix)})
	}
	res.Valid = true
	for _, e := range res.Entries {
		if e.Severity == "error" {
			res.Valid = false
		}
	}
	return res
}

func parseErrorMessage(err error, spec string) string {
	switch {
	case errors.Is(err, ignerrors.ErrUnknownVersion) && strings.HasPrefix(spec, "2."):
		return fmt.Sprintf("spec %s is an Ignition spec 2 config (Ignition 0.x); Ignition 2.x, which ACL and Flatcar run, accepts only spec 3", spec)
	case errors.Is(err, ignerrors.ErrUnknownVersion), errors.Is(err, ignerrors.ErrInvalidVersion):
		return fmt.Sprintf("ignition.version %q is not a spec version this validator knows: %v", spec, err)
	}
	return err.Error()
}

func entries(r report.Report) []Entry {
	var out []Entry
	for _, e := range r.Entries {
		en := Entry{Severity: e.Kind.String(), Message: e.Message}
		if e.Context.Len() > 0 {
			en.Path = e.Context.String()
		}
		if e.Marker.StartP != nil {
			en.Line, en.Column = int(e.Marker.StartP.Line), int(e.Marker.StartP.Column)
		}
		out = append(out, en)
	}
	return out
}

// WriteText prints the result, one entry a line.
func (r CheckResult) WriteText(w io.Writer) error {
	spec := r.Spec
	if spec == "" {
		spec = "unknown"
	}
	verdict := "valid"
	if !r.Valid {
		verdict = "INVALID"
	}
	if _, err := fmt.Fprintf(w, "%s: Ignition spec %s: %s\n", r.File, spec, verdict); err != nil {
		return err
	}
	for _, e := range r.Entries {
		if _, err := fmt.Fprintf(w, "  %s\n", e); err != nil {
			return err
		}
	}
	return nil
}

// UsrPath is a path under /usr in a config that installs aks-flex-node.
type UsrPath struct {
	JSONPath string `json:"jsonPath"`
	Path     string `json:"path"`
}

// looseConfig is the part of any Ignition config (spec 2 or 3) that says
// where files go and what units run. It is decoded loosely so that the /usr
// finding is reported even for a config the validator rejects.
type looseConfig struct {
	Ignition struct {
		Version string `json:"version"`
	} `json:"ignition"`
	Storage struct {
		Files       []struct{ Path string } `json:"files"`
		Directories []struct{ Path string } `json:"directories"`
		Links       []struct {
			Path   string `json:"path"`
			Target string `json:"target"`
		} `json:"links"`
	} `json:"storage"`
	Systemd struct {
		Units []struct {
			Name     string `json:"name"`
			Contents string `json:"contents"`
			Dropins  []struct {
				Name     string `json:"name"`
				Contents string `json:"contents"`
			} `json:"dropins"`
		} `json:"units"`
	} `json:"systemd"`
}

func looseVersion(raw []byte) string {
	var c looseConfig
	if json.Unmarshal(raw, &c) != nil {
		return ""
	}
	return c.Ignition.Version
}

// agentName is how a config that installs this agent is recognised.
const agentName = "aks-flex-node"

// UsrPaths returns the paths under /usr in a config whose units reference
// aks-flex-node: files, directories and links it would create there, and
// absolute paths the units name (ExecStart=/usr/local/bin/aks-flex-node).
// A config that does not mention the agent in a unit is not ours to judge.
func UsrPaths(raw []byte) []UsrPath {
	var c looseConfig
	if json.Unmarshal(raw, &c) != nil {
		return nil
	}
	ours := false
	for _, u := range c.Systemd.Units {
		if strings.Contains(u.Name, agentName) || strings.Contains(u.Contents, agentName) {
			ours = true
		}
		for _, d := range u.Dropins {
			if strings.Contains(d.Contents, agentName) {
				ours = true
			}
		}
	}
	if !ours {
		return nil
	}
	var out []UsrPath
	add := func(jp, p string) {
		if p != "" && underUsr(p) {
			out = append(out, UsrPath{JSONPath: jp, Path: p})
		}
	}
	for i, f := range c.Storage.Files {
		add("$.storage.files."+strconv.Itoa(i)+".path", f.Path)
	}
	for i, d := range c.Storage.Directories {
		add("$.storage.directories."+strconv.Itoa(i)+".path", d.Path)
	}
	for i, l := range c.Storage.Links {
		add("$.storage.links."+strconv.Itoa(i)+".path", l.Path)
	}
	for i, u := range c.Systemd.Units {
		for _, p := range unitUsrPaths(u.Contents) {
			add("$.systemd.units."+strconv.Itoa(i)+".contents", p)
		}
		for j, d := range u.Dropins {
			for _, p := range unitUsrPaths(d.Contents) {
				add("$.systemd.units."+strconv.Itoa(i)+".dropins."+strconv.Itoa(j)+".contents", p)
			}
		}
	}
	return out
}

// unitUsrPaths returns the absolute paths under /usr that a unit's
// Exec*=/Environment lines name for the agent, e.g. the binary in
// ExecStart=/usr/local/bin/aks-flex-node start. Paths of the OS's own tools
// (/usr/bin/mkdir) are not the agent's layout and are left alone.
func unitUsrPaths(contents string) []string {
	var out []string
	for _, line := range strings.Split(contents, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		_, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		for _, f := range strings.FieldsFunc(value, func(r rune) bool {
			return r == ' ' || r == '\t' || r == '"' || r == '\'' || r == '=' || r == ':'
		}) {
			// Exec prefixes: -, @, +, !, !! and :.
			f = strings.TrimLeft(f, "-@+!")
			if strings.HasPrefix(f, "/usr/") && strings.Contains(f, agentName) {
				out = append(out, path.Clean(f))
			}
		}
	}
	return out
}

// CheckPayload checks a classified payload's decoded config (through any
// base64 or gzip it came in).
func CheckPayload(p Payload) CheckResult { return Check(p.Source, p.data) }

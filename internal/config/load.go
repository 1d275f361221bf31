package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// InvalidError says a config file exists but cannot be used; it is invalid
// input (exit code 2), unlike a file that cannot be read at all.
type InvalidError struct {
	File string
	Err  error // DecodeErrors or ValidationErrors
}

// Error is one line for one problem (what scripts and journal readers
// see first), and a list, one problem a line, for several.
func (e *InvalidError) Error() string {
	msg := e.Err.Error()
	if !strings.Contains(msg, "\n") {
		return fmt.Sprintf("config %s is invalid: %s", e.File, msg)
	}
	return fmt.Sprintf("config %s is invalid:\n%s", e.File, indent(msg))
}

func (e *InvalidError) Unwrap() error { return e.Err }

func indent(s string) string {
	out := "  "
	for i := 0; i < len(s); i++ {
		out += string(s[i])
		if s[i] == '\n' && i < len(s)-1 {
			out += "  "
		}
	}
	return out
}

// Parse decodes, defaults, validates and normalises a document. file is
// only used in error messages.
func Parse(file string, data []byte) (*Config, error) {
	c, err := Decode(data)
	if err != nil {
		var de DecodeErrors
		if errors.As(err, &de) {
			for _, e := range de {
				e.Msg = withFile(e.Msg, file)
			}
		}
		return nil, &InvalidError{File: file, Err: err}
	}
	for i := range c.notes {
		c.notes[i] = withFile(c.notes[i], file)
	}
	ApplyDefaults(c)
	if errs := Validate(c); len(errs) > 0 {
		return nil, &InvalidError{File: file, Err: errs}
	}
	if c.Node.Kubelet.ClusterFQDN != "" {
		// Validate accepted it, so this cannot fail.
		c.Node.Kubelet.ClusterFQDN, _ = ServerURL(c.Node.Kubelet.ClusterFQDN)
	}
	if c.Agent.MetricsAddress != "" {
		c.Agent.MetricsAddress, _ = MetricsListenAddress(c.Agent.MetricsAddress)
	}
	return c, nil
}

// Load reads and parses the config file at path (a host path already mapped
// to this process's view).
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// ReadFile reads the config file at path: only a regular file
// (fsutil.OpenRegular: a FIFO in its place would block the reader
// forever), and at most MaxDocumentBytes of it; a larger file is an
// *InvalidError naming the limit, never read into memory.
func ReadFile(path string) ([]byte, error) {
	f, err := fsutil.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxDocumentBytes {
		return nil, &InvalidError{File: path, Err: DecodeErrors{sizeError(fi.Size())}}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxDocumentBytes { // it grew while read
		return nil, &InvalidError{File: path, Err: DecodeErrors{sizeError(int64(len(data)))}}
	}
	return data, nil
}

// Layout resolves the layout this config declares, on root. A validated
// config hands out the layout Validate made; one changed or never validated
// since is resolved here.
func (c *Config) Layout(root, configFile string) (layout.Layout, error) {
	l := c.layout
	if l.Check() != nil || l.Prefix() != c.Agent.HostPrefix || (c.Agent.LogDir != "" && l.LogDir() != c.Agent.LogDir) {
		var err error
		if l, err = layout.New(root, c.Agent.HostPrefix, c.Agent.LogDir); err != nil {
			return layout.Layout{}, fmt.Errorf("agent.hostPrefix: %w", err)
		}
	}
	l = l.WithRoot(root)
	if configFile != "" {
		l = l.WithConfigFile(configFile)
	}
	return l, nil
}

// LookupLayout is the one way entry points started by systemd (the agent
// daemon, the recovery path) find the layout: they cannot inherit the prefix
// from the environment that ran bootstrap, so they read this project's own
// config. An absent or unreadable config yields the default layout, which is
// what a host installed before the prefix existed has on disk; the reason is
// logged at info level so the fallback is never silent. A config that is
// present but invalid is an error naming the file: guessing there could run
// the wrong binary.
func LookupLayout(root, configFile string, log *slog.Logger) (layout.Layout, error) {
	if log == nil {
		log = slog.Default()
	}
	l, err := layout.New(root, "", "")
	if err != nil {
		return layout.Layout{}, err
	}
	l = l.WithConfigFile(configFile)
	data, err := ReadFile(l.OnRoot(configFile))
	var ie *InvalidError
	if errors.As(err, &ie) {
		return layout.Layout{}, err
	}
	if err != nil {
		reason := "unreadable"
		if errors.Is(err, fs.ErrNotExist) {
			reason = "absent"
		}
		log.Info("config "+reason+"; using the default layout", "config", configFile, "prefix", "", "binDir", l.BinDir(), "error", err)
		return l, nil
	}
	c, err := Parse(configFile, data)
	if err != nil {
		return layout.Layout{}, err
	}
	for _, n := range c.Notes() {
		log.Warn("config: "+n, "config", configFile)
	}
	return c.Layout(root, configFile)
}

// Redacted returns a deep copy with every secret replaced, for display.
func (c *Config) Redacted() *Config {
	data, _ := json.Marshal(c)
	var out Config
	_ = json.Unmarshal(data, &out)
	const r = "<redacted>"
	if out.Azure.BootstrapToken != nil && out.Azure.BootstrapToken.Token != "" {
		// The token ID is public (it names the Secret); only the secret half is hidden.
		id, _, _ := strings.Cut(out.Azure.BootstrapToken.Token, ".")
		out.Azure.BootstrapToken.Token = id + "." + r
	}
	if out.Azure.ServicePrincipal != nil && out.Azure.ServicePrincipal.ClientSecret != "" {
		out.Azure.ServicePrincipal.ClientSecret = r
	}
	return &out
}

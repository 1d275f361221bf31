package supportbundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/state"
)

// maxFile bounds a file read whole; bigger ones keep their end.
const maxFile = 4 << 20

// commandTimeout bounds each command the bundle runs.
const commandTimeout = time.Minute

// collector fills the archive, recording what it could not collect.
type collector struct {
	o Options
	m *Manifest
	a *archive
	// applied is the node's applied state, nil when there is none or it
	// cannot be read (the bundle still collects what it can).
	applied *state.Applied
}

func (c *collector) missing(path, reason string) {
	c.m.Missing = append(c.m.Missing, Missing{Path: path, Reason: reason})
}

func (c *collector) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	if c.o.Exec != nil {
		return c.o.Exec(ctx, name, args...)
	}
	return hostos.Exec(ctx, name, args...)
}

// addCommand adds what a command printed; a command that failed without
// printing anything is listed as missing, with its error.
func (c *collector) addCommand(ctx context.Context, member string, max int64, name string, args ...string) error {
	out, err := c.run(ctx, name, args...)
	source := strings.Join(append([]string{name}, args...), " ")
	if err != nil && len(bytes.TrimSpace(out)) == 0 {
		c.missing(member, err.Error()) // it names the command
		return nil
	}
	if err != nil {
		out = append(out, fmt.Sprintf("\n[aks-flex-node: %s: %v]\n", source, err)...)
	}
	return c.a.add(member, source, tail(out, max))
}

// tail keeps the last max bytes of b, from a line start.
func tail(b []byte, max int64) []byte {
	if int64(len(b)) <= max {
		return b
	}
	b = b[int64(len(b))-max:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return append([]byte(fmt.Sprintf("[aks-flex-node: cut to its last %d bytes]\n", max)), b...)
}

// addHostFile adds the host's regular file hostPath (never a link's
// target or a pipe); an absent file is listed as missing when want.
func (c *collector) addHostFile(member, hostPath string, want bool) error {
	data, err := readTail(c.o.Layout.OnRoot(hostPath))
	if err != nil {
		if want || !errors.Is(err, fs.ErrNotExist) {
			c.missing(member, err.Error())
		}
		return nil
	}
	return c.a.add(member, hostPath, data)
}

// readTail reads a regular file, its last maxFile bytes when bigger.
func readTail(p string) ([]byte, error) {
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFile {
		if _, err := f.Seek(fi.Size()-maxFile, 0); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// addJSON adds v as indented JSON, or the error that kept it from being
// made.
func (c *collector) addJSON(member, source string, v any, err error) error {
	if err != nil {
		c.missing(member, fmt.Sprintf("%s: %v", source, err))
		if v == nil {
			return nil
		}
	}
	data, merr := json.MarshalIndent(v, "", "  ")
	if merr != nil {
		c.missing(member, merr.Error())
		return nil
	}
	return c.a.add(member, source, append(data, '\n'))
}

// configSecrets are the literal secrets of the host's config: a bootstrap
// token, a client secret. The config is read leniently: a bundle of a
// host whose config does not validate is when it is needed most.
func (c *collector) configSecrets() []string {
	data, err := readTail(c.o.Layout.OnRoot(c.o.Layout.ConfigFile()))
	if err != nil {
		return nil
	}
	var cfg struct {
		Azure struct {
			BootstrapToken *struct {
				Token string `json:"token"`
			} `json:"bootstrapToken"`
			ServicePrincipal *struct {
				ClientSecret string `json:"clientSecret"`
			} `json:"servicePrincipal"`
		} `json:"azure"`
	}
	_ = json.Unmarshal(data, &cfg)
	var out []string
	if t := cfg.Azure.BootstrapToken; t != nil && t.Token != "" {
		out = append(out, t.Token)
		if _, secret, ok := strings.Cut(t.Token, "."); ok {
			out = append(out, secret)
		}
	}
	if sp := cfg.Azure.ServicePrincipal; sp != nil {
		out = append(out, sp.ClientSecret)
	}
	return out
}

// dirFiles lists the regular files directly in host dir dir, sorted.
func (c *collector) dirFiles(dir string) []string {
	entries, err := os.ReadDir(c.o.Layout.OnRoot(dir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

func base(p string) string { return filepath.Base(p) }

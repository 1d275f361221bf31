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

	"github.com/Azure/aks-flex-node/internal/config"
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
	return cutMarked(b[int64(len(b))-max:], max)
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

// configSecrets are the literal secrets of the host's config: the value
// at each path internal/config marks secret (a bootstrap token, a client
// secret, an embedded kubeconfig), and a token's secret half, so that
// they are hidden wherever else they appear (a log line, a journal). The
// config is read leniently: a bundle of a host whose config does not
// validate is when it is needed most.
func (c *collector) configSecrets() []string {
	data, err := readTail(c.o.Layout.OnRoot(c.o.Layout.ConfigFile()))
	if err != nil {
		return nil
	}
	_, _, out, _ := config.RedactSecrets(data, Redacted)
	var cfg struct {
		Azure struct {
			BootstrapToken *struct {
				Token string `json:"token"`
			} `json:"bootstrapToken"`
		} `json:"azure"`
	}
	_ = json.Unmarshal(data, &cfg)
	if t := cfg.Azure.BootstrapToken; t != nil && t.Token != "" {
		if _, secret, ok := strings.Cut(t.Token, "."); ok {
			out = append(out, secret)
		}
	}
	return out
}

// addConfig adds the host's config with the value at every secret path
// replaced, by path: patterns alone miss a base64 kubeconfig. A config
// that does not parse is left out, with the reason: its secrets cannot
// be found by path.
func (c *collector) addConfig(member string) error {
	p := c.o.Layout.ConfigFile()
	data, err := readTail(c.o.Layout.OnRoot(p))
	if err != nil {
		c.missing(member, err.Error())
		return nil
	}
	red, n, _, err := config.RedactSecrets(data, Redacted)
	if err != nil {
		c.missing(member, fmt.Sprintf("%s is %v (or was cut to its last %d bytes), so its secrets cannot be redacted by key; left out", p, err, maxFile))
		return nil
	}
	c.a.red.count += n
	if err := c.a.add(member, p, red); err != nil {
		return err
	}
	if k := len(c.m.Members) - 1; k >= 0 && c.m.Members[k].Path == member {
		c.m.Members[k].Redactions += n
	}
	return nil
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

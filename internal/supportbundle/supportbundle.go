// Package supportbundle owns `aks-flex-node debug bundle`: what a support
// case needs from a host, collected into one tar.gz: the agent's and the
// machine's journals (bounded by time and size), the rendered units and
// configs on the host and in the machines, the status, debug, preflight
// and host inspect reports, the agent's /healthz and /metrics, mounts,
// addresses, routes and rulesets, the applied state, upgrade records and
// staged bundle manifests, and a manifest of what it holds and what it
// could not collect.
//
// Every member passes through one redactor before it is written: private
// keys, bootstrap token secrets, bearer tokens and JWTs, the values of
// keys that name secrets (token, secret, password, client-key-data, ...),
// credentials in URLs (a userinfo password, a signed URL's signature:
// a rollout release's URLs in rollout.json may carry one) and the literal
// secrets of the host's config. The host's config itself
// is redacted by JSON path first: the value at every key internal/config
// marks secret (config.SecretPaths) is replaced, whatever it looks like
// (a base64 kubeconfig hides its token and key from every pattern), and
// a config that does not parse is left out. The bundle is written
// 0600, whole or not at all, its size capped; on a host that never
// joined it still collects what there is and says what is missing.
package supportbundle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Defaults.
const (
	DefaultMaxBytes   = 64 << 20
	DefaultSince      = 24 * time.Hour
	DefaultJournalMax = 8 << 20
	// ManifestName is the bundle's own index, its last member.
	ManifestName = "manifest.json"
)

// Options are one bundle's inputs.
type Options struct {
	Layout layout.Layout
	// Output is where the bundle goes, as this process opens it.
	Output string
	// MaxBytes caps the members' total size before compression.
	MaxBytes int64
	// Since bounds the journals in time, JournalMax each journal's size.
	Since      time.Duration
	JournalMax int64
	// Exec runs journalctl, ip, nft, systemctl, machinectl, nsenter; nil
	// runs them.
	Exec hostos.Runner
	// Stream runs journalctl (and nsenter for a running machine's), its
	// output kept in a buffer of JournalMax bytes as it comes; nil
	// streams with os/exec, unless Exec is set (then Exec runs them and
	// its whole output is cut).
	Stream Streamer
	// Reports that the command line composes (as `preflight --output
	// json` and `host inspect --output json` do); nil leaves them out.
	Preflight   func(ctx context.Context) (any, error)
	HostInspect func(ctx context.Context) (any, error)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Manifest is the bundle's manifest.json.
type Manifest struct {
	SchemaVersion int       `json:"schemaVersion"`
	Created       time.Time `json:"created"`
	Host          string    `json:"host"`
	AgentVersion  string    `json:"agentVersion"`
	Joined        bool      `json:"joined"`
	Node          string    `json:"node,omitempty"`
	Machine       string    `json:"machine,omitempty"`
	JournalsSince time.Time `json:"journalsSince"`
	MaxBytes      int64     `json:"maxBytes"`
	Redactions    int       `json:"redactions"`
	Members       []Member  `json:"members"`
	Missing       []Missing `json:"missing"`
}

// Member is one file of the bundle.
type Member struct {
	Path       string `json:"path"`
	Source     string `json:"source"`
	Bytes      int64  `json:"bytes"`
	Redactions int    `json:"redactions,omitempty"`
	Truncated  string `json:"truncated,omitempty"`
}

// Missing is something the bundle looked for and could not collect.
type Missing struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Result is what Collect wrote.
type Result struct {
	Manifest   *Manifest
	Path       string
	Compressed int64
	Size       int64 // the members' total, before compression
}

func (o *Options) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Since <= 0 {
		o.Since = DefaultSince
	}
	if o.JournalMax <= 0 {
		o.JournalMax = DefaultJournalMax
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Collect writes the bundle.
func Collect(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	now := o.Now().UTC()
	host, _ := os.Hostname()
	m := &Manifest{SchemaVersion: 1, Created: now, Host: host, AgentVersion: buildinfo.Version, JournalsSince: now.Add(-o.Since), MaxBytes: o.MaxBytes}
	c := &collector{o: o, m: m}
	if a, err := state.Open(o.Layout).Applied(); err == nil && a != nil {
		c.applied = a
		m.Node, m.Machine = a.NodeName, a.Machine
		_, err := os.Stat(o.Layout.OnRoot(o.Layout.JoinedMarker()))
		m.Joined = err == nil
	}
	if !m.Joined {
		c.missing("node", "this host has not joined a cluster: no "+o.Layout.JoinedMarker()+" or applied state; only the host's side is collected")
	}
	top := fmt.Sprintf("aks-flex-node-bundle-%s-%s", host, now.Format("20060102T150405Z"))
	a, err := newArchive(o.Output, top, o.MaxBytes, newRedactor(c.configSecrets()), m, now)
	if err != nil {
		return nil, err
	}
	c.a = a
	// Small and telling first; journals, which the cap cuts first, last.
	for _, step := range []func(context.Context) error{c.reports, c.agentEndpoints, c.hostFiles, c.stateFiles, c.machineFiles, c.hostNetwork, c.journals} {
		if err := step(ctx); err != nil {
			_ = a.abort(err)
			return nil, err
		}
	}
	m.Redactions = a.red.count
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, a.abort(err)
	}
	size := a.written
	compressed, err := a.close(append(data, '\n'))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", o.Output, err)
	}
	return &Result{Manifest: m, Path: o.Output, Compressed: compressed, Size: size + int64(len(data)) + 1}, nil
}

// Summary is the one line the command prints at the end.
func (r *Result) Summary() string {
	m := r.Manifest
	s := fmt.Sprintf("bundle %s: %d files, %s (%s before compression), journals since %s, %d secrets redacted",
		r.Path, len(m.Members)+1, mib(r.Compressed), mib(r.Size), m.JournalsSince.Format(time.RFC3339), m.Redactions)
	switch {
	case !m.Joined:
		s += fmt.Sprintf("; host not joined: %d items missing, listed in %s", len(m.Missing), ManifestName)
	case len(m.Missing) > 0:
		s += fmt.Sprintf("; %d items missing, listed in %s", len(m.Missing), ManifestName)
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"text/template"

	"github.com/Azure/aks-flex-node/internal/config"
)

const (
	sourceKey = "bootstrap.offlineArtifacts.source"
	// ManifestName is the file an offline bundle lists its files in.
	ManifestName = "manifest.json"
	// ChecksumSuffix names the checksum file next to each bundle file.
	ChecksumSuffix = ".sha256"
	// maxListed bounds how many missing files one message names.
	maxListed = 5
)

// manifest is the part of manifest.json preflight reads. It is read
// leniently: the artifact package owns the format and verifies checksums;
// preflight only wants to know that the listed files are there. A
// manifest in upstream's layout lists no files, only the versions (and
// image references) its file list follows from: that list is the
// artifact package's to derive, so such a bundle goes to
// VerifyOfflineArtifacts as it is.
type manifest struct {
	Files []struct {
		Path string `json:"path"`
	} `json:"files"`
	Versions json.RawMessage `json:"versions"`
}

// sourceData is what bootstrap.offlineArtifacts.source is templated with.
type sourceData struct {
	KubernetesVersion string
}

// ExpandSource resolves the offline artifact source template for c.
func ExpandSource(c *config.Config) (string, error) {
	t, err := template.New("source").Option("missingkey=error").Parse(c.Bootstrap.OfflineArtifacts.Source)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, sourceData{KubernetesVersion: c.Components.Kubernetes}); err != nil {
		return "", err
	}
	return b.String(), nil
}

func artifactSourcesCheck(e *Env) Check {
	src := e.Config.Bootstrap.OfflineArtifacts.Source
	target := sourceKey
	if src != "" {
		target = fmt.Sprintf("%s %s", sourceKey, src)
	}
	return NewCheck(NameArtifactSources, target, func(ctx context.Context) Result {
		cfg := e.configFile()
		if src == "" {
			return OK("online: components are downloaded from their upstream URLs at start; those are not probed from preflight")
		}
		expanded, err := ExpandSource(e.Config)
		if err != nil {
			return Error(fmt.Sprintf("fix %s in %s; it may use {{ .KubernetesVersion }}", sourceKey, cfg), "%s %q does not expand: %v", sourceKey, src, err)
		}
		if strings.HasPrefix(expanded, "oci://") {
			if e.InspectOfflineArtifacts == nil {
				return OK("%s: checked at pull time", expanded)
			}
			if err := e.InspectOfflineArtifacts(ctx, expanded); err != nil {
				return Error(fmt.Sprintf("push the bundle for Kubernetes %s to %s with `aks-flex-node artifacts push`, or fix %s in %s", e.Config.Components.Kubernetes, expanded, sourceKey, cfg),
					"offline bundle %s does not verify: %v", expanded, err)
			}
			return OK("%s: artifact and its %s agree with the config, file digests match", expanded, ManifestName)
		}
		dir := strings.TrimPrefix(expanded, "file://")
		if !path.IsAbs(dir) {
			return Error(fmt.Sprintf("set %s in %s to an absolute path, file:///path or oci://registry/repository:tag", sourceKey, cfg), "%s expands to %q, which is not an absolute path", sourceKey, expanded)
		}
		dir = path.Clean(dir)
		remedy := fmt.Sprintf("copy the offline bundle for Kubernetes %s to %s, or fix %s in %s", e.Config.Components.Kubernetes, dir, sourceKey, cfg)
		fi, err := e.stat(dir)
		switch {
		case err != nil:
			return Error(remedy, "offline bundle %s (from %s in %s): %v", dir, sourceKey, cfg, err)
		case !fi.IsDir():
			return Error(remedy, "offline bundle %s (from %s in %s) is not a directory", dir, sourceKey, cfg)
		}
		mpath := path.Join(dir, ManifestName)
		data, err := e.readFile(mpath)
		if err != nil {
			return Error(remedy, "offline bundle %s has no readable %s: %v", dir, ManifestName, err)
		}
		var m manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return Error(remedy, "%s is not a manifest: %v", mpath, err)
		}
		if len(m.Files) == 0 && len(m.Versions) > 0 {
			return upstreamBundle(ctx, e, dir, remedy)
		}
		if len(m.Files) == 0 {
			return Error(remedy, "%s lists no files (want {\"files\": [{\"path\": ...}]}, or upstream's {\"versions\": ...})", mpath)
		}
		var missing []string
		for _, f := range m.Files {
			c := path.Clean(f.Path)
			if f.Path == "" || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
				missing = append(missing, fmt.Sprintf("%q (not a path inside the bundle)", f.Path))
				continue
			}
			for _, want := range []string{c, c + ChecksumSuffix} {
				if _, err := e.stat(path.Join(dir, want)); err != nil {
					missing = append(missing, want)
				}
			}
		}
		if len(missing) > 0 {
			more := ""
			if len(missing) > maxListed {
				more = fmt.Sprintf(" and %d more", len(missing)-maxListed)
				missing = missing[:maxListed]
			}
			return Error(remedy, "offline bundle %s is incomplete: %s lists files that are missing or invalid: %s%s", dir, mpath, strings.Join(missing, ", "), more)
		}
		if e.VerifyOfflineArtifacts != nil {
			host, err := e.onRoot(dir)
			how := ""
			if err == nil {
				how, err = e.VerifyOfflineArtifacts(ctx, host)
			}
			if err != nil {
				return Error(remedy, "offline bundle %s does not verify: %v", dir, err)
			}
			return OK("offline bundle %s: %d files present, %s", dir, len(m.Files), how)
		}
		return OK("offline bundle %s: %s and all %d listed files with their %s files present", dir, ManifestName, len(m.Files), ChecksumSuffix)
	})
}

// upstreamBundle checks a bundle whose manifest.json is in upstream's
// layout: in full when the artifact package is plugged in (which names
// every missing or changed file), else at start.
func upstreamBundle(ctx context.Context, e *Env, dir, remedy string) Result {
	if e.VerifyOfflineArtifacts == nil {
		return OK("offline bundle %s: %s in upstream's layout; its files are checked at start", dir, ManifestName)
	}
	host, err := e.onRoot(dir)
	how := ""
	if err == nil {
		how, err = e.VerifyOfflineArtifacts(ctx, host)
	}
	if err != nil {
		return Error(remedy, "offline bundle %s (upstream's layout) does not verify: %v", dir, err)
	}
	return OK("offline bundle %s (upstream's layout): %s", dir, how)
}

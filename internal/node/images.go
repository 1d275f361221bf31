package node

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// ExecFunc runs a command inside the machine (args[0] is the program) and
// returns its combined output. The machine package supplies it.
type ExecFunc func(ctx context.Context, args ...string) ([]byte, error)

// criNamespace is the containerd namespace the CRI plugin, and so the
// kubelet, sees images in.
const criNamespace = "k8s.io"

// ImageArchives lists the image archives (*.tar in nodedirs.ImageArchives) of the
// machine at machineRoot, as paths inside the machine, sorted. A missing
// directory is no archives. The directory is resolved as the machine sees
// it: a link there cannot make the agent list a host directory.
func ImageArchives(machineRoot string) ([]string, error) {
	dir, err := fsroot.Resolve(machineRoot, nodedirs.ImageArchives)
	if err != nil {
		return nil, fmt.Errorf("list image archives: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list image archives: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".tar") {
			out = append(out, path.Join(nodedirs.ImageArchives, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ImportImages imports each archive (a path inside the machine, read from
// the host at machineRoot) into containerd's k8s.io namespace with
// `ctr images import`, run through exec. An archive whose image names are
// all listed already is skipped, so a converged re-run imports nothing.
// Archives whose names cannot be read (an OCI layout with only a tag in
// its ref.name annotation) are imported every time; ctr makes that
// harmless, only slower.
func ImportImages(ctx context.Context, machineRoot string, exec ExecFunc, archives []string) error {
	_, err := ImportImagesChanged(ctx, machineRoot, exec, archives)
	return err
}

// ImportImagesChanged is ImportImages that also reports whether the
// images containerd lists changed. When every archive was skipped it
// runs ctr once in all (each run is an exec into the machine, the bulk
// of a converged start's time); otherwise it lists the images again to
// tell a re-imported archive of the same images from a new one, unless
// the store was empty.
func ImportImagesChanged(ctx context.Context, machineRoot string, exec ExecFunc, archives []string) (changed bool, err error) {
	if len(archives) == 0 {
		return false, nil
	}
	out, err := exec(ctx, CtrBinary, "-n", criNamespace, "images", "ls", "-q")
	if err != nil {
		return false, fmt.Errorf("import images: list images: %w: %s", err, bytes.TrimSpace(out))
	}
	before := out
	imported := 0
	present := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			present[l] = true
		}
	}
	for _, a := range archives {
		refs, err := archiveRefs(machineRoot, a)
		if err != nil {
			return false, fmt.Errorf("import images: read %s: %w", a, err)
		}
		if allPresent(refs, present) {
			continue
		}
		if out, err := exec(ctx, CtrBinary, "-n", criNamespace, "images", "import", a); err != nil {
			return false, fmt.Errorf("import images: import %s: %w: %s", a, err, bytes.TrimSpace(out))
		}
		imported++
	}
	if imported == 0 {
		return false, nil
	}
	if len(present) == 0 {
		// Into an empty store (a new machine): that changed it, without
		// listing it again.
		return true, nil
	}
	after, err := exec(ctx, CtrBinary, "-n", criNamespace, "images", "ls", "-q")
	if err != nil {
		return true, fmt.Errorf("import images: list images: %w: %s", err, bytes.TrimSpace(after))
	}
	return !sameLines(before, after), nil
}

// sameLines compares two listings as sets of lines: ctr does not promise
// an order.
func sameLines(a, b []byte) bool {
	la, lb := strings.Fields(string(a)), strings.Fields(string(b))
	sort.Strings(la)
	sort.Strings(lb)
	return slices.Equal(la, lb)
}

func allPresent(refs []string, present map[string]bool) bool {
	if len(refs) == 0 {
		return false
	}
	for _, r := range refs {
		if !present[r] {
			return false
		}
	}
	return true
}

// archiveRefs returns the image names ctr import gives the images in the
// tar at file inside the machine at machineRoot: the RepoTags of a
// docker-save archive (manifest.json), normalised as containerd does, or
// the names in an OCI layout's index.json. It returns nil when it finds no
// full name. The machine runs while this reads, so the file is opened
// confined to its rootfs and only if it is a regular file: a link or a
// named pipe put there cannot make the agent read a host file or hang.
func archiveRefs(machineRoot, file string) ([]string, error) {
	f, err := fsutil.OpenIn(machineRoot, file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var dockerRefs, ociRefs []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
				return nil, fmt.Errorf("manifest.json: %w", err)
			}
			for _, e := range m {
				for _, t := range e.RepoTags {
					if r, ok := normalizeRef(t); ok {
						dockerRefs = append(dockerRefs, r)
					}
				}
			}
		case "index.json":
			var idx struct {
				Manifests []struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"manifests"`
			}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
				return nil, fmt.Errorf("index.json: %w", err)
			}
			for _, m := range idx.Manifests {
				if n := m.Annotations["io.containerd.image.name"]; n != "" {
					ociRefs = append(ociRefs, n)
				} else if r, ok := normalizeRef(m.Annotations["org.opencontainers.image.ref.name"]); ok && strings.Contains(m.Annotations["org.opencontainers.image.ref.name"], "/") {
					ociRefs = append(ociRefs, r)
				}
			}
		}
	}
	// containerd prefers the docker manifest when an archive has both.
	if len(dockerRefs) > 0 {
		return dockerRefs, nil
	}
	return ociRefs, nil
}

// normalizeRef is containerd's docker reference normalisation in short:
// docker.io for names without a registry, library/ for official images,
// :latest without a tag, the tag dropped when a digest is present.
func normalizeRef(ref string) (string, bool) {
	if ref == "" || strings.ContainsAny(ref, " \t\n") {
		return "", false
	}
	name, digest, _ := strings.Cut(ref, "@")
	tag := ""
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	if name == "" {
		return "", false
	}
	domain, rest, found := strings.Cut(name, "/")
	if !found || (!strings.ContainsAny(domain, ".:") && domain != "localhost") {
		domain, rest = "docker.io", name
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	out := domain + "/" + rest
	switch {
	case digest != "":
		return out + "@" + digest, true
	case tag != "":
		return out + ":" + tag, true
	default:
		return out + ":latest", true
	}
}

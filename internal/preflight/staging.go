package preflight

import (
	"context"
	"fmt"
	"strings"
)

// NameStagingSpace is the repave's (and so a fleet plan's) check that the
// release's bundle fits where it is staged, before any of it is pulled.
const NameStagingSpace = "staging-space"

// stagingMargin is kept free beyond the bundle's bytes: the pull's
// verification record and a filesystem's own overhead; a disk left with
// less would fail the kubelet's next image pull anyway.
const stagingMargin = 16 << 20

// stagingSpaceCheck: the filesystem holding the bundles dir has room for
// what is left to pull of a registry bundle (its manifests give each
// file's size), so a plan reports a disk too small as a verdict instead
// of a pull that fails half-way with ENOSPC. A local (file://) bundle is
// already on the host, and an upstream download's size is not known
// before it: both pass, saying so.
func stagingSpaceCheck(e *Env) Check {
	bundles := e.Layout.BundlesDir()
	return NewCheck(NameStagingSpace, bundles, func(ctx context.Context) Result {
		src, err := ExpandSource(e.Config)
		switch {
		case err != nil:
			return OK("the offline bundle's source does not expand; %s says why", NameArtifactSources)
		case src == "":
			return OK("online: the components' sizes are not known before their download")
		case !strings.HasPrefix(src, "oci://"):
			return OK("%s is on the host: nothing to pull", src)
		case e.StagingNeed == nil:
			return OK("%s: its size is checked at pull time", src)
		}
		need, err := e.StagingNeed(ctx, src)
		if err != nil {
			// The same fetch of the manifests fails in artifact-sources,
			// which names what to do; one error is enough.
			return Warning("see "+NameArtifactSources, "%s: size not known: %v", src, err)
		}
		if need == 0 {
			return OK("%s is staged under %s", src, bundles)
		}
		free, anc, failed := e.freeUnder(bundles)
		if failed != nil {
			return *failed
		}
		have := fmt.Sprintf("%s to pull from %s into %s, %s free on its filesystem (statfs of %s)", mib(need), src, bundles, mib(free), anc)
		if free < need+stagingMargin {
			return Error(fmt.Sprintf("free space on the filesystem holding %s or grow it: at least %s", bundles, mib(need+stagingMargin)),
				"%s: the bundle does not fit", have)
		}
		return OK("%s", have)
	})
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

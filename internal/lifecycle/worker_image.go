package lifecycle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
)

// WorkerImage is where one start takes the worker image from, decided
// once: bootstrap.ociImage when set; else the image the offline bundle
// carries; else the image upstream publishes for this host, by upstream's
// rule (image.UpstreamDefault: the host's distro, an NVIDIA GPU).
type WorkerImage struct {
	configured string
	stager     *artifact.Stager
	layout     layout.Layout

	once   sync.Once
	choice ImageChoice
	err    error
	// used is the choice provision-machine acted on.
	used ImageChoice
}

// ImageChoice is the worker image a start uses and why.
type ImageChoice struct {
	// Ref is the reference provision-machine unpacks. For a registry
	// bundle not staged yet it names where stage will put the image;
	// Bundle then reads it from the bundle's registry meanwhile.
	Ref string
	// Source says where Ref came from, for messages.
	Source string
	// Bundle is set when the image is the offline bundle's.
	Bundle *artifact.BundleImage
}

// Sources of the worker image, as messages name them.
const (
	SourceConfig   = "bootstrap.ociImage"
	SourceBundle   = "the offline bundle"
	SourceUpstream = "upstream's default"
)

// NewWorkerImage decides from configured (bootstrap.ociImage), the
// bundle s stages, and the host under l's root.
func NewWorkerImage(configured string, s *artifact.Stager, l layout.Layout) *WorkerImage {
	return &WorkerImage{configured: configured, stager: s, layout: l}
}

// Choose returns the choice, deciding it on the first call.
func (w *WorkerImage) Choose(ctx context.Context) (ImageChoice, error) {
	w.once.Do(func() { w.choice, w.err = w.choose(ctx) })
	return w.choice, w.err
}

func (w *WorkerImage) choose(ctx context.Context) (ImageChoice, error) {
	if w.configured != "" {
		return ImageChoice{Ref: w.configured, Source: SourceConfig}, nil
	}
	b, err := w.stager.BundleImage(ctx)
	if err != nil {
		return ImageChoice{}, fmt.Errorf("the offline bundle's worker image: %w", err)
	}
	if b != nil {
		return ImageChoice{Ref: b.Ref, Source: SourceBundle, Bundle: b}, nil
	}
	distro := ""
	if osr, _, err := hostos.ReadOSRelease(w.layout.Root()); err == nil {
		distro = image.HostDistro(osr.ID, osr.VersionID, strings.Join(osr.IDLike, " "))
	}
	gpu := image.NvidiaGPU(filepath.Join(w.layout.OnRoot("/"), "dev"))
	src := fmt.Sprintf("%s for %s", SourceUpstream, describeHost(distro, gpu))
	return ImageChoice{Ref: image.UpstreamDefault(distro, gpu), Source: src}, nil
}

// Staged is the choice once stage has run: a bundle image is taken from
// where the bundle was staged.
func (w *WorkerImage) Staged(ctx context.Context, st artifact.Staged) (ImageChoice, error) {
	c, err := w.Choose(ctx)
	if err != nil {
		return c, err
	}
	if c.Source == SourceBundle {
		if st.WorkerImage == "" {
			return c, fmt.Errorf("the staged bundle %s carries no worker image, though its manifest said %s", st.HostDir, c.Ref)
		}
		c.Ref = st.WorkerImage
	}
	w.used = c
	return c, nil
}

// Used is the choice provision-machine acted on (zero before it ran).
func (w *WorkerImage) Used() ImageChoice { return w.used }

func describeHost(distro string, gpu bool) string {
	if distro == "" {
		distro = "other distros (" + image.DistroUbuntu2404 + ")"
	}
	if gpu {
		return distro + " with an NVIDIA GPU"
	}
	return distro + ", no GPU"
}

// ImageNeeds are the netfilter tools the node c describes will call in
// its machine, which the worker image contract requires: iptables for the
// portmap plugin the bridge CNI config chains (networking.mode bridge)
// and for the agent's kube-proxy in iptables mode, nft for it in nftables
// mode (networking.kubeProxyMode, else as the node package detects it).
func ImageNeeds(c *config.Config) image.Needs {
	n := image.Needs{IPTables: !c.Networking.ClusterCNI()}
	if c.Networking.AgentKubeProxy() {
		mode := c.Networking.KubeProxyMode
		if mode == "" {
			mode = node.DetectKubeProxyMode()
		}
		if mode == config.KubeProxyNFTables {
			n.NFT = true
		} else {
			n.IPTables = true
		}
	}
	return n
}

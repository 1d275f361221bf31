package fleetsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// simNode is one simulated host: its identity and what its kubelet does
// to the API server at rest, as the 1.35 kubelet does it: the Node
// registered and its status posted, a Lease in kube-node-lease renewed
// every 10 s (a quarter of its 40 s duration), and the Node's status
// posted again every nodeStatusReportFrequency (5 min) when nothing
// changed.
type simNode struct {
	name string
	ip   string
	cfg  *rest.Config // the node's credential, no wrapping
	uid  types.UID
}

// Kubelet cadences (the 1.35 defaults).
const (
	leaseDuration = 40 * time.Second
	leaseRenew    = 10 * time.Second
)

// PodCIDR is the simulated cluster's: a /24 for each of up to 4,096
// Nodes (the end-to-end tests' 10.244.0.0/16 holds 256, and the rest of
// a larger fleet would have no pod range, so no routes to keep).
const PodCIDR = "10.128.0.0/12"

func nodeName(i int) string { return fmt.Sprintf("sim-%04d", i) }

// nodeIP is node i's InternalIP: all in 10.1.0.0/16, one subnet, so
// every peer is on the link and routed to.
func nodeIP(i int) string { return fmt.Sprintf("10.1.%d.%d", i/250, i%250+1) }

func (n *simNode) kubelet(m *meter) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(n.cfg)
	cfg.WrapTransport = m.wrap(n.name, "kubelet")
	cfg.QPS, cfg.Burst = 50, 100 // the kubelet's kubeAPIQPS and kubeAPIBurst
	return kubernetes.NewForConfig(cfg)
}

// register creates the Node as the node itself (NodeRestriction lets a
// node create its own), posts its address and readiness, and creates
// its Lease.
func (n *simNode) register(ctx context.Context, cs kubernetes.Interface) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{
		"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux", "flexnode.azure.com/pool": "sim"}}}
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register Node %s as itself: %w", n.name, err)
	}
	n.uid = created.UID
	if err := n.postStatus(ctx, cs, n.ip); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, imagesPatch(), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("post the images of %s: %w", n.name, err)
	}
	now := metav1.NewMicroTime(time.Now())
	secs := int32(leaseDuration / time.Second)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: n.uid}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.name, LeaseDurationSeconds: &secs, RenewTime: &now},
	}
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the Lease of %s: %w", n.name, err)
	}
	return nil
}

// postStatus patches the Node's status as the kubelet's status update
// does: its address, and Ready with a fresh heartbeat.
func (n *simNode) postStatus(ctx context.Context, cs kubernetes.Interface, ip string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}],`+
		`"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"simulated","lastHeartbeatTime":%q,"lastTransitionTime":%q}],`+
		`"nodeInfo":{"kubeletVersion":"v1.35.0","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}`, ip, n.name, now, now)
	_, err := cs.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("post the status of %s: %w", n.name, err)
	}
	return nil
}

// heartbeat renews the Lease every leaseRenew and posts the status every
// statusEvery (each from a random phase, as kubelets started at different
// moments are), until ctx ends.
func (n *simNode) heartbeat(ctx context.Context, cs kubernetes.Interface, statusEvery time.Duration) {
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := time.NewTimer(rand.N(leaseRenew))
	status := time.NewTimer(rand.N(statusEvery))
	defer renew.Stop()
	defer status.Stop()
	// The kubelet updates from the Lease it last wrote, and reads it
	// again only when that failed (a conflict).
	var last *coordinationv1.Lease
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			renew.Reset(leaseRenew)
			if last == nil {
				l, err := leases.Get(ctx, n.name, metav1.GetOptions{})
				if err != nil {
					continue
				}
				last = l
			}
			now := metav1.NewMicroTime(time.Now())
			last.Spec.RenewTime = &now
			l, err := leases.Update(ctx, last, metav1.UpdateOptions{})
			if err != nil {
				last = nil
				continue
			}
			last = l
		case <-status.C:
			status.Reset(statusEvery)
			_ = n.postStatus(ctx, cs, n.ip)
		}
	}
}

// imagesPatch is a kubelet's image list as it posts it: a worker's
// images (the kubelet reports up to 50) are most of a Node's bytes, and
// every watcher of the Nodes receives them with each status update, so
// a simulated Node must be as large as a real one for the fan-out to
// cost what it does. 30 images of about 250 bytes each.
func imagesPatch() []byte {
	var imgs []string
	for i := range 30 {
		repo := fmt.Sprintf("registry.example/oss/kubernetes/component-%02d", i)
		imgs = append(imgs, fmt.Sprintf(`{"names":["%s@sha256:%064x","%s:v1.35.%d"],"sizeBytes":%d}`, repo, i+1, repo, i, 10_000_000+i*1_234_567))
	}
	return []byte(`{"status":{"images":[` + strings.Join(imgs, ",") + `]}}`)
}

package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writePodNetwork struct {
	machine  Machine
	config   *config.Config
	timeout  time.Duration
	progress func(string)
	// began is when this start began: a Node created before it is a
	// re-join (see reportNow).
	began time.Time
}

// WritePodNetwork returns the task that gives a bridge-mode node its pod
// network (networking.mode cluster: nothing to do) when the config does
// not name the node's range (networking.podCIDR;
// write-node-config wrote the bridge config then): it waits, up to
// timeout, for the registered Node's spec.podCIDR, which the controller
// manager allocates when it runs with --allocate-node-cidrs, and writes
// the bridge config for it. Until then the node is not Ready (no CNI
// config), and when none comes the error says where a range comes from.
func WritePodNetwork(m Machine, c *config.Config, timeout time.Duration, progress func(string)) task.Task {
	return &writePodNetwork{machine: m, config: c, timeout: timeout, progress: progress, began: time.Now()}
}

func (t *writePodNetwork) Name() string { return "write-pod-network" }

func (t *writePodNetwork) Do(ctx context.Context) (task.Result, error) {
	if t.config.Networking.ClusterCNI() {
		return task.Result{Detail: "networking.mode cluster: the cluster's CNI writes the network config"}, nil
	}
	if t.config.Networking.PodCIDR != "" {
		return task.Result{}, nil
	}
	kc, err := node.ClientConfig(t.config, t.machine.Layout, t.machine.Root())
	if err != nil {
		return task.Result{}, err
	}
	cs, err := kubeclient.New(kc, kubeclient.Step)
	if err != nil {
		return task.Result{}, err
	}
	name := t.config.Agent.NodeName
	var cidr, last string
	var created time.Time
	err = pollJittered(ctx, 500*time.Millisecond, t.timeout, func(ctx context.Context) (bool, error) {
		// Any version will do (the watch cache, not etcd, at every poll):
		// a stale answer only delays the wait for the pod CIDR.
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
		state := "node not visible yet"
		if err == nil {
			created = n.CreationTimestamp.Time
			if cidr = n.Spec.PodCIDR; cidr != "" {
				return true, nil
			}
			state = "node registered, no spec.podCIDR yet"
		}
		if state != last && t.progress != nil {
			t.progress(state)
		}
		last = state
		return false, nil
	})
	if err != nil {
		return task.Result{}, fmt.Errorf("node %s has no pod CIDR after %v (%s): the controller manager allocates one only with --allocate-node-cidrs and --cluster-cidr; otherwise set networking.podCIDR to this node's range", name, t.timeout, last)
	}
	changed, err := node.WriteCNIConfig(t.machine.Root(), t.config, cidr)
	if err != nil || !changed || !created.Before(t.began) {
		return task.Result{Changed: changed}, err
	}
	return t.reportNow(ctx, cs, name)
}

// selfReport bounds how long write-pod-network waits for a re-joined
// kubelet to report its pod network on its own before it restarts it.
const selfReport = 2 * time.Second

// reportNow makes the kubelet of a re-joined Node report the pod network
// just written. A kubelet that registers a new Node, or finds its Node
// not Ready (reset marks it so: mark-node-stopped), patches its status
// every 100 ms until the Node is Ready, so it reports within a second:
// that is waited for, up to selfReport. One that found its Node from
// before still marked Ready (a reset that could not tell the API server,
// a host re-joined without one) stopped that fast loop at once, posted
// NotReady (no CNI config yet) and says Ready only at its next status
// sync, 10 s later. A restart costs about a second and runs the fast loop
// again, on a Node that now says NotReady.
func (t *writePodNetwork) reportNow(ctx context.Context, cs kubeclient.Interface, name string) (task.Result, error) {
	// A machine not running yet (a repave writes the new side's config
	// before it boots) starts its kubelet with the config in place.
	if st, err := t.machine.Control.State(ctx, t.machine.Name); err != nil || st != "active" {
		return task.Result{Changed: true}, err
	}
	if started, err := kubeletStarted(ctx, t.machine); err == nil {
		want := readyWant{after: notBefore(started), since: "the kubelet started", poll: 100 * time.Millisecond}
		if _, err := waitReadyAt(ctx, cs, name, want, selfReport, nil); err == nil {
			return task.Result{Changed: true, Detail: "the kubelet reported the pod network"}, nil
		}
	}
	if out, err := t.machine.exec(ctx, "systemctl", "restart", "kubelet.service"); err != nil {
		return task.Result{Changed: true}, fmt.Errorf("restart the kubelet in %s to report its pod network: %v: %s", t.machine.Name, err, bytes.TrimSpace(out))
	}
	return task.Result{Changed: true, Detail: fmt.Sprintf("kubelet restarted: Node %s was Ready from before this start, so it would report the pod network only at its next status sync, 10 s on", name)}, nil
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/metrics"
)

// writeRolloutStatusLoop names the loop in logs.
const writeRolloutStatusLoop = "write-rollout-status"

// RolloutStatusWriter is every agent's candidacy for writing the
// FlexNodeRollouts' status (fleet.StatusWriter): one agent of the
// cluster, elected through the FlexNodeSlot status-writer, writes it;
// when it dies or is cut off, another takes over within the lease
// duration (fleet.DefaultLeaseDuration and its neighbours say why those
// values). Nothing in the cluster has to run for it.
type RolloutStatusWriter struct {
	// NodeName is this node's; the candidate holds the lock in its name.
	NodeName string
	// Config is the node's own credential (called at each election term:
	// the kubelet's client certificate rotates and a repave switches the
	// machine it is read from).
	Config func() (*rest.Config, error)
	// HTTPClient, when set, carries every request (the fleet simulator
	// shares one among many candidates); nil: one made from Config's
	// config at each term.
	HTTPClient *http.Client
	// Nodes is the process's Node informer: an elected writer reads the
	// Nodes there (it starts it with the loop's context unless another
	// loop did), never through an informer of its own.
	Nodes   *NodeInformer
	Log     *slog.Logger
	Metrics *metrics.Registry
	// LeaseDuration and Election's periods: zero values are the fleet
	// package's defaults (tests shorten them).
	LeaseDuration time.Duration
	Election      fleet.Election

	noFleet noFleet
}

// WriteRolloutStatus is the loop; it needs the API server.
func WriteRolloutStatus(w *RolloutStatusWriter) Loop {
	return Loop{Name: writeRolloutStatusLoop, Run: w.Term}
}

// Term is one pass: when the cluster has rollouts, campaign, and while
// elected write their status, until the lock is lost (an error: the
// next pass campaigns again) or ctx ends. A cluster without a rollout
// costs a list from the watch cache and then one watch, until a rollout
// is created or the server ends the watch (minutes); one that does not
// serve the rollouts to nodes (`cluster prepare --fleet` not applied: no
// CRD, or no RBAC) a list after a doubling wait (noFleet).
func (w *RolloutStatusWriter) Term(ctx context.Context) error {
	if w.Nodes == nil {
		return errors.New(writeRolloutStatusLoop + ": no Node informer (RolloutStatusWriter.Nodes)")
	}
	if !w.noFleet.due(time.Now()) {
		return nil
	}
	cfg, err := w.Config()
	if err != nil {
		return fmt.Errorf("the node's credential: %w", err)
	}
	hc := w.HTTPClient
	if hc == nil {
		// The product's user agent goes in the transport: a REST client
		// given an HTTP client does not add its config's to each request
		// (the audit log showed the writer as Go-http-client).
		c := rest.CopyConfig(cfg)
		c.UserAgent = buildinfo.UserAgent()
		if hc, err = rest.HTTPClientFor(c); err != nil {
			return err
		}
	}
	ro, err := fleet.NewRollouts(cfg, hc)
	if err != nil {
		return err
	}
	list, err := ro.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	switch {
	case notServed(err):
		wait := w.noFleet.absent(time.Now())
		w.Log.Info(writeRolloutStatusLoop+": the cluster does not serve FlexNodeRollouts to this node; looking again later",
			"fix", "aks-flex-node cluster prepare --fleet", "error", err, "next-look-in", wait)
		return nil
	case err != nil:
		return fmt.Errorf("list rollouts: %w", err)
	case len(list.Items) == 0:
		w.noFleet.present()
		if created, err := waitForRollout(ctx, ro, list.ResourceVersion); err != nil || !created {
			return err
		}
	}
	w.noFleet.present()
	lease := w.LeaseDuration
	if lease <= 0 {
		lease = fleet.DefaultLeaseDuration
	}
	lock, err := fleet.NewSlotLock(cfg, hc, v1alpha1.Namespace, fleet.StatusWriterSlot, fleet.WriterIdentity(w.NodeName), lease)
	if err != nil {
		return err
	}
	// The loop's context, not the term's: the informer outlives a term
	// (the other loops read it too).
	w.Nodes.Start(ctx)
	sw, err := fleet.NewStatusWriter(cfg, hc, w.Nodes, lock.Identity(), w.Log)
	if err != nil {
		return err
	}
	sw.Wrote = w.Metrics.StatusWritten
	e := w.Election
	e.Lock, e.Log, e.Lead, e.Leading = lock, w.Log, sw.Run, w.Metrics.StatusWriter
	err = e.Run(ctx)
	if errors.Is(err, fleet.ErrLeadershipLost) {
		return fmt.Errorf("%s: %w; campaigning again at the next pass", writeRolloutStatusLoop, err)
	}
	return err
}

// idleWatch is how long the server keeps an idle agent's watch for the
// first rollout open before the next pass lists again.
const idleWatch = 5 * time.Minute

// waitForRollout watches the rollouts from rv until one is created
// (true), or the watch ends (false: the next pass lists again).
func waitForRollout(ctx context.Context, ro *fleet.Rollouts, rv string) (bool, error) {
	secs := int64(idleWatch / time.Second)
	ctx, cancel := context.WithTimeout(ctx, idleWatch+30*time.Second) // a stalled connection too
	defer cancel()
	w, err := ro.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &secs})
	if err != nil {
		return false, fmt.Errorf("watch rollouts: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Added {
			return true, nil
		}
	}
	return false, nil
}

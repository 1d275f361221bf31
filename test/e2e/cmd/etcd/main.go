// Command etcd runs a single-member embedded etcd for the end-to-end test
// control plane. It exists so the harness can manage etcd like the other
// components: a separate process that is started, waited for and killed.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise")
	name := flag.String("name", "default", "member name")
	fsync := flag.Bool("fsync", false, "fsync the WAL and backend (off: test data is disposable)")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	if err := run(*dataDir, *clientURL, *peerURL, *name, *fsync); err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		os.Exit(1)
	}
}

func run(dataDir, clientURL, peerURL, name string, fsync bool) error {
	cu, err := url.Parse(clientURL)
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(name)
	cfg.UnsafeNoFsync = !fsync
	cfg.LogOutputs = []string{"stderr"}

	start := time.Now()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready to serve %s after %s\n", clientURL, time.Since(start).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fmt.Errorf("not ready after 60s")
	case s := <-sig:
		return fmt.Errorf("stopped by %s before ready", s)
	}
	select {
	case err := <-e.Err():
		return err
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: stopping on %s\n", s)
		return nil
	}
}

// Copyright The Kubernetes Authors; adapted from k8s.io/kubernetes/cmd (Apache-2.0).
// Built for the end-to-end tests only: the kube-proxy of the test bundle,
// which a node with networking.kubeProxy "agent" runs in its machine.

// Command kube-proxy is the upstream kube-proxy entry point.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}

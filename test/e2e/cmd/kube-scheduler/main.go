// Copyright The Kubernetes Authors; adapted from k8s.io/kubernetes/cmd (Apache-2.0).
// Built for the end-to-end test control plane only.

// Command kube-scheduler is the upstream scheduler entry point.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}

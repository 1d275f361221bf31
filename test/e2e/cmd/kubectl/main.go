// Copyright The Kubernetes Authors; adapted from k8s.io/kubernetes/cmd (Apache-2.0).
// Built for the end-to-end test control plane only.

// Command kubectl is the upstream kubectl entry point.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Verbosity must be set before command construction logs anything.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}

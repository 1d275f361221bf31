// Package machineapi owns the node's AKS Machine in Azure Resource
// Manager: its resource ID and the machine-name rule, the client of the
// documented machine API (GET, PUT with If-None-Match / If-Match, the
// Azure-AsyncOperation pattern, paged lists), its retry and polling
// bounds, and upstream's registration rule (Register). It is built on
// azcore's pipeline and long-running-operation poller; every request goes
// through the product's transport policy and carries a token from the
// node's Entra identity for the ARM audience.
package machineapi

package main

import (
	"os"

	"github.com/Azure/aks-flex-node/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}

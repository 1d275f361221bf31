module github.com/Azure/aks-flex-node

go 1.26.8

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/google/renameio/v2 v2.0.2
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)

// Command refdocs rewrites the generated reference pages under
// docs/reference from the code. Run it from the repository root
// (`make docs`).
package main

import (
	"fmt"
	"os"

	"github.com/Azure/aks-flex-node/internal/refdocs"
)

func main() {
	if err := refdocs.Write("."); err != nil {
		fmt.Fprintf(os.Stderr, "refdocs: %v\n", err)
		os.Exit(1)
	}
}

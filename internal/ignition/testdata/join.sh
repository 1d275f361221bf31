#!/bin/bash
set -euo pipefail
curl -fsSL https://example.invalid/install.sh | bash
/usr/local/bin/aks-flex-node start

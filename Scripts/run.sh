#!/usr/bin/env bash
# Builds Atrium (the host and every plugin library) and runs atriumd with the reference
# services of manifests/. Arguments go to atriumd (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh
swift build
exec .build/debug/atriumd "$@"

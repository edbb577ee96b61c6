#!/usr/bin/env bash
# Runs Atrium's whole test suite. Installs what the tests need first: Python's cbor2, which
# the CBOR cross-check tests compare against. Builds everything first, because the
# end-to-end tests start the real atriumd with the real plugin libraries. Extra arguments
# go to `swift test` (for example `Scripts/test.sh --filter FrameCodec`).
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh

if ! python3 -c 'import cbor2' 2>/dev/null; then
    echo "Installing Python's cbor2 for the CBOR cross-check tests..."
    python3 -m pip install --quiet --disable-pip-version-check cbor2
fi

swift build
exec swift test "$@"

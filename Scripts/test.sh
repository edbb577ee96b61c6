#!/usr/bin/env bash
# Runs Atrium's whole test suite. Installs what the tests need first: Python's cbor2, which
# the CBOR cross-check tests compare against, and prometheus_client, whose parser reads what
# --metrics serves. Builds everything first, because the
# end-to-end tests start the real atriumd with the real plugin libraries. Extra arguments
# go to `swift test` (for example `Scripts/test.sh --filter FrameCodec`).
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh

for module in cbor2 prometheus_client; do
    if ! python3 -c "import $module" 2>/dev/null; then
        echo "Installing Python's $module for the tests..."
        python3 -m pip install --quiet --disable-pip-version-check "$module"
    fi
done

swift build
log=$(mktemp /tmp/atrium-test.XXXXXX)
# Everything the tests make in the temporary folder (the hosts' state folders, sockets,
# manifests, generated packages) goes into one folder of this run's, removed at the end, so
# that no run leaves hundreds of folders in /tmp. Others may read it: a worker a test runs as
# another user loads its plugin from there.
scratch=$(mktemp -d /tmp/atrium-tests.XXXXXX)
chmod 755 "$scratch"
export TMPDIR="$scratch"
trap 'rm -f "$log"; rm -rf "$scratch"' EXIT
status=0
if [ $# -eq 0 ]; then
    # The whole suite, then the tests of `atrium new`'s templates alone: they build whole Swift
    # packages (minutes on two cores), which would slow the tests that watch the clock.
    swift test --skip TemplateTests 2>&1 | tee "$log" || status=$?
    swift test --skip-build --filter TemplateTests 2>&1 | tee -a "$log" || status=$?
    # The Python client (clients/python), against the atriumd just built.
    Scripts/test-python.sh 2>&1 | tee -a "$log" || status=$?
else
    swift test "$@" 2>&1 | tee "$log" || status=$?
fi
[ $status -eq 0 ] || Scripts/what-failed.sh "$log"
exit $status

#!/usr/bin/env bash
# Builds Atrium (the host and every plugin library) and runs atriumd with the reference
# services of manifests/. Arguments go to atriumd (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh
swift build
# The reference manifests, unless the command line names a manifests folder or a configuration
# file (--config), or ATRIUM_MANIFESTS names folders.
[ -z "${ATRIUM_MANIFESTS:-}" ] || exec .build/debug/atriumd "$@"
for argument in "$@"; do
    case "$argument" in --manifests | --manifests=* | --config | --config=* | token | --help | -h | --version) exec .build/debug/atriumd "$@" ;; esac
done
exec .build/debug/atriumd --manifests manifests "$@"

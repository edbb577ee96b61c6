#!/usr/bin/env bash
# The Python client's tests (clients/python): installs it as a user would (pip install
# ./clients/python), checks its types (mypy --strict), and runs its tests with pytest against
# the atriumd of the debug build (swift build first; Scripts/test.sh does). Extra arguments
# go to pytest (for example `Scripts/test-python.sh -k pairing`).
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(python3 -m pip install --quiet --disable-pip-version-check)
[ "$(id -u)" -ne 0 ] || pip+=(--root-user-action=ignore)
"${pip[@]}" "./clients/python[test]"
python3 -m mypy --strict clients/python/src
python3 -m pytest -q -p no:cacheprovider clients/python/tests "$@"

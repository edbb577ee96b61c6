#!/usr/bin/env bash
# Prints, from a `swift test` log, what failed: each failed test and the issues it recorded,
# with their detail lines. The test scripts call it at the end of a failed run, so the end
# of a long log (all a CI page may keep) says what went wrong.
#
#   Scripts/what-failed.sh LOG
set -euo pipefail
log=${1:?usage: Scripts/what-failed.sh LOG}
echo "--- what failed (from $(grep -c '✘' "$log" || true) lines marked ✘):" >&2
# An issue's line starts with ✘; the lines after it that start with ↳ are its detail.
awk '/✘/ { show = 1; print; next } show && /^[[:space:]]*↳/ { print; next } { show = 0 }' "$log" | head -200 >&2

#!/usr/bin/env bash
# Runs Atrium's whole test suite once more, built with AddressSanitizer (LeakSanitizer
# for the host): the host, the client, the Swift and C plugins and the test fixtures, in a build
# folder of its own (.build-asan). Every process the tests start (atriumd, its worker
# processes, atrium) is instrumented too, and writes what it finds to one folder; any report
# from any of them fails the run, even when the test that caused it passed.
#
#   Scripts/test-asan.sh                      # the whole suite (what CI runs)
#   Scripts/test-asan.sh --filter ChurnTests  # extra arguments go to `swift test`
#
# Deliberate crashes (the tests' plugins that segfault or abort) stay crashes: ASan leaves
# those signals to the process. Leaks that are meant are listed, with the reason, in
# Scripts/lsan-suppressions.txt. A host a test never stops is killed, and not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh
for module in cbor2 prometheus_client; do
    python3 -c "import $module" 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check "$module"
done

flags=(--scratch-path .build-asan -Xswiftc -sanitize=address -Xcc -fsanitize=address)
swift build --build-tests "${flags[@]}"

reports=$(mktemp -d /tmp/atrium-asan.XXXXXX)
# A worker that runs as another user (a manifest's "user") must be able to write its report.
chmod 1777 "$reports"
# The few tests that measure resident memory or set an address-space limit step aside.
export ATRIUM_SANITIZER=address
options="log_path=$reports/report:handle_segv=0:handle_abort=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:allow_user_segv_handler=1"
# Leaks are checked in every atriumd the tests start (TestHost passes these on) and in its
# worker processes. Not in the test runner: Swift keeps some class references in enum
# payloads with tag bits set (Data, for one), which LeakSanitizer cannot see as pointers, so
# in a process as full of test scaffolding as the runner it reports memory still in use.
export ASAN_OPTIONS="detect_leaks=0:$options"
export ATRIUM_HOST_ASAN_OPTIONS="detect_leaks=1:$options"
export LSAN_OPTIONS="suppressions=$PWD/Scripts/lsan-suppressions.txt:print_suppressions=0"
# Swift's crash backtracer stays off: under AddressSanitizer a worker it caught a SIGSEGV in
# ended with status 1 instead of the signal the tests expect (the plain suite checks the
# backtrace a worker's crash prints).
export SWIFT_BACKTRACE=enable=no
status=0
log=$(mktemp /tmp/atrium-test.XXXXXX)
# What the tests make in the temporary folder goes into one folder of this run's, removed at
# the end (as in Scripts/test.sh).
scratch=$(mktemp -d /tmp/atrium-tests.XXXXXX)
chmod 755 "$scratch"
export TMPDIR="$scratch"
trap 'rm -rf "$scratch"' EXIT
swift test --skip-build "${flags[@]}" "$@" 2>&1 | tee "$log" || status=$?

# A report is an ERROR (a memory error, or leaks); anything else in the folder is a note
# (LeakSanitizer says "False leaks are possible" when a thread was exiting as it looked), shown
# but not a failure.
for report in "$reports"/report*; do
    [ -e "$report" ] || continue
    if grep -q "ERROR:" "$report"; then
        echo "--- AddressSanitizer reported ($report):" >&2
        status=1
    else
        echo "--- a note from AddressSanitizer ($report):" >&2
    fi
    cat "$report" >&2
done
rm -rf "$reports"
# Last, so that the end of the log says it.
grep -q '✘' "$log" && Scripts/what-failed.sh "$log"
rm -f "$log"
exit $status

#!/usr/bin/env bash
# Builds Atrium's libFuzzer targets (with AddressSanitizer) and runs each for a bounded time
# from the seed corpus in Fuzz/Corpus. A crash, a failed check or a leak fails the run; the
# input that did it is saved under .build-fuzz/artifacts/ (turn it into a test).
#
#   Scripts/fuzz.sh                 # every target, 60 s each
#   Scripts/fuzz.sh 30              # every target, 30 s each (what CI runs)
#   Scripts/fuzz.sh 600 ValueSetFuzz
#
# Targets: FrameFuzz (the frame decoders: clients' and workers'), ValueSetFuzz (the ValueSet decoder against the
# host's validator), ManifestFuzz (the manifest parser), URIFuzz (the launch URI checks),
# ELFFuzz (reading a plugin library's symbol tables when it lacks the entry point), HTTPFuzz
# (a TLS ClientHello's ALPN, Range headers, Content-Disposition of a file's name).
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/ensure-deps.sh

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(FrameFuzz ValueSetFuzz ManifestFuzz URIFuzz ELFFuzz HTTPFuzz)

declare -A corpus=([FrameFuzz]=frames [ValueSetFuzz]=valuesets [ManifestFuzz]=manifests [URIFuzz]=uris [ELFFuzz]=elf [HTTPFuzz]=http)

scratch=.build-fuzz
for target in "${targets[@]}"; do
    [ -n "${corpus[$target]:-}" ] || { echo "fuzz.sh: no target $target (try: ${!corpus[*]})" >&2; exit 64; }
done
# One build for every target: ATRIUM_FUZZ adds them to the package (see Package.swift).
for target in "${targets[@]}"; do
    ATRIUM_FUZZ=1 swift build --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --product "$target"
done

mkdir -p "$scratch/artifacts"
status=0
for target in "${targets[@]}"; do
    # New inputs go to a scratch copy, so that the seed corpus in the repository stays as it is.
    work="$scratch/corpus/$target"
    mkdir -p "$work"
    echo "== $target: ${seconds} s from Fuzz/Corpus/${corpus[$target]}"
    if ! "$scratch/debug/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$scratch/artifacts/$target-" \
        "$work" "Fuzz/Corpus/${corpus[$target]}" 2>&1 | tail -n 25; then
        status=1
    fi
done
if [ "$status" -ne 0 ]; then
    echo "fuzz.sh: a target failed; the input is in $scratch/artifacts/" >&2
fi
exit "$status"

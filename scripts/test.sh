#!/usr/bin/env bash
# The whole test suite, as CI runs it: every test but those that run torch.compile, on every
# core; then each file's compiling tests in a pytest process of their own, one file per core
# at a time (why apart: CONTRIBUTING.md, "Tests that compile"). Arguments go to every pytest
# call; the exit status is non-zero if any of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# the files holding compiling tests, read from either form that -q or -qq prints them in,
# those with the most such tests first (the longest groups first: a short one ends the
# phase); listed beside the first phase (6 s of collection it would otherwise wait for)
files=$(mktemp)
trap 'rm -f "$files"' EXIT
pytest --collect-only -q -p no:cacheprovider -m compiles "$@" \
  | awk -F': ' '/^[^ ]+\.py: [0-9]+$/ {n[$1] += $2} /^[^ ]+\.py::/ {split($0, a, "::"); n[a[1]]++}
                END {for (f in n) print n[f], f}' \
  | sort -k1,1nr -k2 | cut -d' ' -f2 > "$files" &
listing=$!
pytest -n auto --dist loadfile -m "not compiles" "$@"
others=$?
wait "$listing"
xargs -r -P "$(nproc)" -I{} sh -c \
  'out=$(pytest -q -p no:cacheprovider -m compiles "$@" 2>&1); s=$?; printf "%s\n" "$out"; exit $s' \
  _ {} "$@" < "$files"
compiled=$?
exit $((others || compiled))

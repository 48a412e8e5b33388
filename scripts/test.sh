#!/usr/bin/env bash
# The whole test suite, as CI runs it: every test but those that run torch.compile, on every
# core; then the tests that compile, apart (why: CONTRIBUTING.md, "Tests that compile"), in
# groups, one pytest process per group and core at a time: a file of at least ALONE such
# tests is a group of its own, the files of fewer share one (each process first pays ~7 s of
# start-up and inductor's first compile: ten files of 1-5 such tests took 130 s of a core one
# process each, 67-73 s together). Arguments go to every pytest call; the exit status is
# non-zero if any of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ALONE=6
# the groups, one a line, read from either form that -q or -qq prints the files in, those
# with the most such tests first (the longest first: a short one ends the phase); listed
# beside the first phase (6 s of collection it would otherwise wait for)
groups=$(mktemp)
trap 'rm -f "$groups"' EXIT
pytest --collect-only -q -p no:cacheprovider -m compiles "$@" \
  | awk -F': ' -v alone="$ALONE" '
      /^[^ ]+\.py: [0-9]+$/ {n[$1] += $2}
      /^[^ ]+\.py::/ {split($0, a, "::"); n[a[1]]++}
      END {
        for (f in n) if (n[f] >= alone) print n[f], f; else {few += n[f]; files = files " " f}
        if (few) print few, files
      }' \
  | sort -k1,1nr -k2 | cut -d' ' -f2- > "$groups" &
listing=$!
pytest -n auto --dist loadfile -m "not compiles" "$@"
others=$?
wait "$listing"
xargs -r -d '\n' -P "$(nproc)" -I{} sh -c \
  'files=$1; shift; out=$(pytest -q -p no:cacheprovider -m compiles "$@" $files 2>&1); s=$?
   printf "%s\n" "$out"; exit $s' \
  _ {} "$@" < "$groups"
compiled=$?
exit $((others || compiled))

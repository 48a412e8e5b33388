#!/usr/bin/env bash
# The whole test suite, as CI runs it: every test but those that run torch.compile on every
# core, and beside them each file's compiling tests in a pytest process of their own, one
# file after another (why apart: CONTRIBUTING.md, "Tests that compile"). The others wait on
# sweeps, servers, a cluster and a browser for about a quarter of their time (1.5 of 2 cores
# busy), which the compiles use. Arguments go to every pytest call; the exit status is
# non-zero if any of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# the files holding compiling tests, read from either form -q or -qq prints them in
files=$(pytest --collect-only -q -p no:cacheprovider -m compiles "$@" \
  | grep -E '^[^ ]+\.py(::|: [0-9]+$)' | cut -d: -f1 | sort -u)
compiled_log=$(mktemp)
(
  status=0
  for file in $files; do
    pytest -q -p no:cacheprovider -m compiles "$file" "$@" || status=1
  done
  exit $status
) >"$compiled_log" 2>&1 &
compiling=$!
pytest -n auto --dist loadfile -m "not compiles" "$@"
others=$?
wait $compiling
compiled=$?
echo "=== the compiling tests, one process per file ($(echo $files | wc -w) files)"
cat "$compiled_log"
rm -f "$compiled_log"
exit $((others || compiled))

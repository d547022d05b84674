#!/usr/bin/env bash
# Run pytest from the project venv. Exit code 5 ("no tests collected") fails the run,
# unless ALLOW_NO_TESTS=1: a marker subset (e.g. -m ship_blocking) may legitimately be empty.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/.venv/bin/python" -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  if [ "${ALLOW_NO_TESTS:-0}" = "1" ]; then
    echo "pytest: no tests selected by: $* (allowed)"
    exit 0
  fi
  echo "pytest: no tests were collected: the suite is broken" >&2
fi
exit "$rc"

#!/usr/bin/env bash
# Set up from nothing and run every test: a private venv holding tox, then tox, which builds
# its own environment (core + the five plugins + mlx[cpu], torch==2.13.0 from constraints.txt)
# and runs pytest over tests/ and plugins/.
#
#   bash scripts/test.sh                       # the whole suite (what .ci/run runs): py311, with lint
#                                              # and packaging beside it (tox -e lint,packaging)
#   bash scripts/test.sh -- -k router -x       # arguments after -- go to pytest
#   bash scripts/test.sh -e packaging          # other arguments go to tox
#
# PYTHON picks the interpreter for the tool venv (default: python3.11, else python3).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
tools="$root/.venv-tools"
export PIP_CONSTRAINT="$root/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$tools/bin/python" -m tox --version >/dev/null 2>&1; then
    echo "scripts/test.sh: creating $tools with tox ($("$python" --version))"
    rm -rf "$tools"
    "$python" -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet "tox>=4.11,<5"
fi

set +e
if [ "$#" -eq 0 ]; then
    # The whole suite (CI). lint, then packaging (which builds wheels and fresh venvs, one process at a
    # time), run beside py311 (whose pytest keeps every core busy) instead of before and after it; their
    # output is printed after py311's, and any failing fails the run.
    mkdir -p "$root/.tox"
    log="$root/.tox/lint-packaging.log"
    "$tools/bin/python" -m tox -e lint,packaging >"$log" 2>&1 &
    beside=$!
    trap 'kill "$beside" 2>/dev/null' EXIT
    "$tools/bin/python" -m tox -e py311
    rc=$?
    wait "$beside"
    beside_rc=$?
    trap - EXIT
    echo "scripts/test.sh: tox -e lint,packaging ran beside py311; its output:"
    cat "$log"
    if [ "$rc" -eq 0 ]; then rc=$beside_rc; fi
else
    "$tools/bin/python" -m tox "$@"
    rc=$?
fi
set -e
if [ "$rc" -eq 5 ]; then
    # pytest's "no tests collected": a suite that ran nothing did not pass.
    echo "scripts/test.sh: pytest collected no tests (exit 5): failing" >&2
fi
exit "$rc"

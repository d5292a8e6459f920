#!/usr/bin/env bash
# Set up from nothing and run every test: a private venv holding tox, then tox, which builds
# its own environment (core + the five plugins + mlx[cpu], torch==2.13.0 from constraints.txt)
# and runs pytest over tests/ and plugins/.
#
#   bash scripts/test.sh                       # the whole suite (what .ci/run runs)
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
"$tools/bin/python" -m tox "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    # pytest's "no tests collected": a suite that ran nothing did not pass.
    echo "scripts/test.sh: pytest collected no tests (exit 5): failing" >&2
fi
exit "$rc"

#!/usr/bin/env bash
# Set up from nothing and run the main job: a venv with torch==2.13.0, torchdevice, its five
# plugins and mlx[cpu] (installed as a user would, not editable), then `torchdevice info` and
# `torchdevice run examples/train_cuda.py` (a CUDA-written training script) on whatever backend
# torchdevice selects here; on the CPU backend its numbers are compared with a hand port.
#
#   bash scripts/demo.sh
#   TORCHDEVICE_BACKEND=mlx bash scripts/demo.sh      # any torchdevice variable applies
#
# PYTHON picks the interpreter (default: python3.11, else python3).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
venv="$root/.venv-demo"
export PIP_CONSTRAINT="$root/constraints.txt"   # torch==2.13.0
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$venv/bin/python" ]; then
    echo "scripts/demo.sh: creating $venv ($("$python" --version))"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet \
    "torch==2.13.0" numpy \
    'mlx[cpu]; sys_platform == "linux"' 'mlx; sys_platform == "darwin"' \
    . plugins/torchdevice-cuda plugins/torchdevice-mps plugins/torchdevice-mtia \
    plugins/torchdevice-xpu plugins/torchdevice-mlx

echo "== torchdevice info"
"$venv/bin/torchdevice" info

echo "== main job: a CUDA-written training script, unmodified, through torchdevice run"
out="$(mktemp -d)"
"$venv/bin/torchdevice" run examples/train_cuda.py --out "$out/translated.json"

backend="$("$venv/bin/python" -c 'import torchdevice; print(torchdevice.current_backend())')"
if [ "$backend" = cpu ]; then
    echo "== the same program ported to the CPU by hand, for comparison"
    "$venv/bin/python" examples/ported/train_cpu.py --out "$out/ported.json"
    "$venv/bin/python" scripts/compare_runs.py "$out/translated.json" "$out/ported.json"
fi

#!/usr/bin/env bash
# Hardware check on an NVIDIA machine (not part of CI; CI has no GPU). Uses the machine's own
# torch (whatever CUDA build it has), makes the checkout importable with entry points through
# a throwaway dist-info folder (no pip, no network), then:
#   1. torchdevice info                      (cuda must be available and selected)
#   2. the vendor kit's conformance checks on the real torchdevice_cuda plugin
#   3. the cuda plugin's own tests
#   4. examples/train_cuda.py natively and through `torchdevice run` (cuda -> cuda): same numbers
#   5. the core suite, for the record of what assumes a CPU-only machine
#
#   bash scripts/gpu_check.sh [OUTDIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-$(mktemp -d)}"; [ "$out" = "--env" ] || mkdir -p "$out"
py="${PYTHON:-python3}"
site="$(mktemp -d)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
mkdist() {  # name, entry_points.txt body
    d="$site/${1//-/_}-$version.dist-info"; mkdir -p "$d"
    printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$1" "$version" > "$d/METADATA"
    printf '%b' "$2" > "$d/entry_points.txt"
}
mkdist torchdevice '[torch.backends]\ntorchdevice = _torchdevice_autoload:hook\n'
paths="$root"
for p in cuda mps mtia xpu; do
    mkdist "torchdevice-$p" "[torchdevice]\n$p = torchdevice_$p:plugin\n"
    paths="$paths:$root/plugins/torchdevice-$p"
done
export PYTHONPATH="$paths:$site:$root/tests"
# the `torchdevice` console script pip would install (tests run it)
mkdir -p "$site/bin"
printf '#!/bin/sh\nexec %s -m torchdevice "$@"\n' "$(command -v "$py")" > "$site/bin/torchdevice"
chmod +x "$site/bin/torchdevice"
export PATH="$site/bin:$PATH"
export PYTHONUNBUFFERED=1
# `source scripts/gpu_check.sh --env` only sets up PYTHONPATH (for ad hoc commands).
if [ "${1:-}" = "--env" ]; then return 0 2>/dev/null || exit 0; fi
rc=0
step() { echo; echo "== $*"; }
step "machine"; nvidia-smi -L; "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
step "1. torchdevice info"; "$py" -m torchdevice info || rc=1
step "2. conformance kit on torchdevice_cuda:plugin"; "$py" -m torchdevice.testing --check torchdevice_cuda:plugin || rc=1
step "3. cuda plugin tests"; "$py" -m pytest -q -p no:cacheprovider --import-mode=importlib plugins/torchdevice-cuda 2>&1 | tail -15 || rc=1
step "4. train_cuda.py native vs translated (cuda -> cuda)"
"$py" examples/train_cuda.py --out "$out/native.json" > "$out/native.log" 2>&1 || { rc=1; tail "$out/native.log"; }
TORCHDEVICE_BACKEND=cuda "$py" -m torchdevice run examples/train_cuda.py --out "$out/translated.json" > "$out/translated.log" 2>&1 || { rc=1; tail "$out/translated.log"; }
"$py" scripts/compare_runs.py "$out/translated.json" "$out/native.json" || rc=1
step "5. core suite on a CUDA machine (record only)"
"$py" -m pytest -q -p no:cacheprovider --import-mode=importlib --timeout 300 tests -k "not packaging" > "$out/core-suite.log" 2>&1
tail -25 "$out/core-suite.log"
exit $rc

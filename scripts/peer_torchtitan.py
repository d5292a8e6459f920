"""Peer run: torchtitan's own trainer, unmodified, through ``torchdevice run`` on each backend; losses compared.

torchtitan (PyTorch's reference trainer) is written for CUDA: NCCL, FSDP2, DTensor tensor parallelism,
``torch.compile``, activation checkpointing, distributed checkpointing (DCP). This installs torchtitan
0.2.2 -- the newest that trains on CPU with torch 2.13 (0.3.0 needs FlexAttention's backward, which the
CPU lacks) -- and trains its llama3 debug model for 10 steps under ``torchrun`` in each configuration
of ``CONFIGS``, three ways:

- ``native``: a copy of torchtitan with the edits a CPU run needs (``NATIVE_EDITS``: the device fallback,
  the memory monitor, the barrier's ``device_ids``, and FSDP's reduce-scatter as a plain SUM: gloo has no
  ``PREMUL_SUM``), run as ``torchrun -m torchtitan.train``;
- ``cpu``, ``sim``: the installed torchtitan, unmodified, run as ``torchrun -m torchdevice run -m
  torchtitan.train`` with ``TORCHDEVICE_BACKEND`` set.

Every run starts from one seed checkpoint made natively on the CPU (torchtitan initializes the weights on the
device, from the device's generator). Every translated run's losses (and gradient norms), as torchtitan logs
them per step, must equal the native run's step for step. ``--bitwise`` compares bits too: every side runs
the trainer through ``scripts/peer/torchtitan/peer_torchtitan_digests.py``, which records a digest of every
parameter and gradient at each step (torchtitan's log shows 5 decimals). Exit status 1 on any difference or
failed run; a table is printed. One command::

    python scripts/peer_torchtitan.py --assets TORCHTITAN_CHECKOUT/tests/assets [--configs ddp,fsdp,...]
                                      [--backends cpu,sim] [--bitwise] [--workdir .peer/torchtitan] [--current-env]

``--assets`` is torchtitan's ``tests/assets`` (``tokenizer/`` and ``c4_test/data.json``; neither the
wheel nor the sdist ships them: ``git clone --branch v0.2.2 https://github.com/pytorch/torchtitan``).
``--synthetic-data`` writes a seeded stand-in for ``c4_test`` where only the tokenizer is at hand. By
default torchtitan goes into a venv in the work directory layered over this interpreter's packages (so the
torch and torchdevice under test are this environment's); ``--current-env`` installs it here instead.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

VERSION = "0.2.2"
ROOT = Path(__file__).resolve().parents[1]
# --bitwise: the trainer run through this folder's module, which records digests of the tensors at each step
DIGESTS = ROOT / "scripts" / "peer" / "torchtitan"
DIGESTS_MODULE = "peer_torchtitan_digests"
DIGESTS_VARIABLE = "PEER_TORCHTITAN_DIGESTS"
STEPS = 10
# The debug model (dim 256, 6 layers, vocab 2048) on the shortest inputs, seeded; colour codes off.
COMMON = ["--model.name", "llama3", "--model.flavor", "debugmodel", "--training.steps", str(STEPS),
          "--training.local_batch_size", "2", "--training.seq_len", "64", "--training.dataset", "c4_test",
          "--lr_scheduler.warmup_steps", "2", "--metrics.log_freq", "1", "--metrics.disable_color_printing",
          "--debug.seed", "42", "--activation_checkpoint.mode", "none", "--comm.init_timeout_seconds", "600"]
DDP = ["--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "1"]
FSDP = ["--parallelism.data_parallel_shard_degree", "2"]
TP = ["--parallelism.data_parallel_shard_degree", "1", "--parallelism.tensor_parallel_degree", "2"]


@dataclass(frozen=True)
class Config:
    """One configuration: torchtitan's arguments, its ranks, and (checkpointing) a second, resuming run."""

    args: list[str]
    nproc: int = 2
    resume: list[str] = field(default_factory=list)


CHECKPOINT = ["--checkpoint.enable", "--checkpoint.interval", "5", "--checkpoint.folder", "checkpoint"]
CONFIGS: dict[str, Config] = {
    "ddp": Config(DDP),
    "fsdp": Config(FSDP),
    "tp": Config(TP),
    # shard 2 x tp 2 needs four ranks
    "fsdp+tp": Config(["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"],
                      nproc=4),
    "compile": Config([*FSDP, "--compile.enable"]),  # torchtitan compiles the model and the loss
    "ac-selective": Config([*FSDP, "--activation_checkpoint.mode", "selective",
                            "--activation_checkpoint.selective_ac_option", "op"]),
    "ac-full": Config([*FSDP, "--activation_checkpoint.mode", "full"]),
    # saves at steps 5 and 10; the second run loads step 5 and trains steps 6-15
    "checkpoint": Config([*FSDP, *CHECKPOINT],
                         resume=[*FSDP, *CHECKPOINT, "--training.steps", str(STEPS + 5), "--checkpoint.load_step", "5"]),
}

# (file in the torchtitan package, text, replacement): what a native CPU run of 0.2.2 needs.
_CPU_MONITOR = '''

class _CPUMemoryMonitor:
    """peer_torchtitan's native-baseline edit: torch.cpu has no memory statistics."""

    def __init__(self, device: str = "cpu"):
        self.device = torch.device(device)
        self.device_name = "cpu"
        self.device_capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.device_capacity_gib = self.device_capacity / 1024**3

    def get_peak_stats(self):
        return DeviceMemStats(0.0, 0.0, 0.0, 0.0, 0, 0)

    def reset_peak_stats(self):
        pass


def build_device_memory_monitor():'''
NATIVE_EDITS: list[tuple[str, str, str]] = [
    ("tools/utils.py", '_get_available_device_type() or "cuda"', '_get_available_device_type() or "cpu"'),
    ("components/metrics.py", "\n\ndef build_device_memory_monitor():", _CPU_MONITOR),
    ("components/metrics.py", "device_memory_monitor = DeviceMemoryMonitor(device_type)",
     'device_memory_monitor = (_CPUMemoryMonitor if device_type == "cpu" else DeviceMemoryMonitor)(device_type)'),
    ("distributed/utils.py", "torch.distributed.barrier(device_ids=[device_module.current_device()])",
     'torch.distributed.barrier(device_ids=None if device_type == "cpu" else [device_module.current_device()])'),
    # FSDP with a divide factor of 1 reduce-scatters with PREMUL_SUM(1.0), which gloo lacks; forced SUM is the same
    # sum (FSDP skips the division by 1)
    ("models/llama3/infra/parallelize.py", "            module.set_gradient_divide_factor(1.0)\n",
     "            module.set_gradient_divide_factor(1.0)\n"
     "            from torchtitan.tools.utils import device_type\n\n"
     '            module.set_force_sum_reduction_for_comms(device_type == "cpu")\n'),
]

LOSS = re.compile(r"step:\s*(\d+)\s+loss:\s*(\S+)\s+grad_norm:\s*(\S+)")


def apply_edits(package: Path, edits: list[tuple[str, str, str]]) -> None:
    """Each edit's text must occur exactly once in its file: another torchtitan must not be half edited."""
    for rel, old, new in edits:
        path = package / rel
        text = path.read_text()
        if text.count(old) != 1:
            sys.exit(f"native edit of {path}: expected one occurrence of {old!r}, found {text.count(old)} "
                     f"(is this torchtitan {VERSION}?)")
        path.write_text(text.replace(old, new))


def parse_losses(text: str) -> list[tuple[int, str, str]]:
    """torchtitan's per-step log lines as (step, loss, grad_norm), in the order logged."""
    return [(int(step), loss, norm) for step, loss, norm in LOSS.findall(text)]


def compare(native: list[tuple[int, str, str]], translated: list[tuple[int, str, str]]) -> str | None:
    """None when every step's loss and gradient norm are equal; otherwise the first difference, in words."""
    if not native:
        return "the native run logged no step: nothing to compare"
    for ours, theirs in zip(native, translated):
        if ours != theirs:
            return f"step {ours[0]}: native loss {ours[1]} grad_norm {ours[2]}, translated " \
                   f"step {theirs[0]} loss {theirs[1]} grad_norm {theirs[2]}"
    if len(native) != len(translated):
        return f"{len(translated)} steps logged, native {len(native)}"
    return None


def compare_digests(native: list[dict], translated: list[dict], steps: list[int]) -> str | None:
    """None when every recorded step's parameters, gradients and norm are bit-equal; else the first difference."""
    if not native:
        return "the native run recorded no tensors: nothing to compare"
    if len(native) != len(translated):
        return f"{len(translated)} steps' tensors recorded, native {len(native)}"
    for step, ours, theirs in zip(steps, native, translated):
        for key in ("params", "grads"):
            if len(ours[key]) != len(theirs[key]):
                return f"step {step}: {len(theirs[key])} {key} recorded, native {len(ours[key])}"
            unequal = [i for i, (a, b) in enumerate(zip(ours[key], theirs[key])) if a != b]
            if unequal:
                return f"step {step}: {len(unequal)} of {len(ours[key])} {key} not bit-equal (the first: #{unequal[0]})"
        if ours["norm"] != theirs["norm"]:
            return f"step {step}: the gradient norm is not bit-equal"
    return None


def write_synthetic_c4(folder: Path, documents: int = 400, seed: int = 0) -> None:
    """c4_test's layout (``data.json``: one ``{"text": ...}`` a line) with seeded words, for runs without it."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9))) for _ in range(500)]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "data.json", "w") as f:
        for _ in range(documents):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(50, 300)))}) + "\n")


def stage_assets(assets: Path, workdir: Path, synthetic: bool) -> Path:
    """``workdir/assets`` with ``tokenizer/`` and ``c4_test/`` taken from torchtitan's ``tests/assets``."""
    staged = workdir / "assets"
    if staged.exists():
        shutil.rmtree(staged)
    needed = ["tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"]
    needed += [] if synthetic else ["c4_test/data.json"]
    missing = [name for name in needed if not (assets / name).is_file()]
    if missing:
        sys.exit(f"{assets} lacks {', '.join(missing)}: give torchtitan {VERSION}'s tests/assets "
                 f"(git clone --branch v{VERSION} https://github.com/pytorch/torchtitan)")
    shutil.copytree(assets / "tokenizer", staged / "tokenizer")
    if synthetic:
        write_synthetic_c4(staged / "c4_test")
    else:
        shutil.copytree(assets / "c4_test", staged / "c4_test")
    return staged


def install(workdir: Path, current_env: bool) -> str:
    """The interpreter that has torchtitan: this one, or a venv layered over this interpreter's packages."""
    if current_env:
        python = sys.executable
    else:
        venv = workdir / "venv"
        python = str(venv / "bin" / "python")
        if not Path(python).exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            # this interpreter's torch and torchdevice; addsitedir also reads their .pth files (editable installs)
            parents = [p for p in sys.path if p.endswith("-packages")]
            Path(site, "_peer_parent_env.pth").write_text(f"import site; list(map(site.addsitedir, {parents!r}))\n")
    # torchtitan imports triton at package import (its MoE kernels), even for a CPU run
    subprocess.run([python, "-m", "pip", "install", "-q", f"torchtitan=={VERSION}", "triton"], check=True)
    return python


def native_tree(python: str, workdir: Path) -> Path:
    """A copy of the installed torchtitan with ``NATIVE_EDITS`` applied; put it first on PYTHONPATH."""
    package = subprocess.run([python, "-c", "import torchtitan, os; print(os.path.dirname(torchtitan.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    tree = workdir / "native"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(package, tree / "torchtitan", ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(tree / "torchtitan", NATIVE_EDITS)
    return tree


def command(python: str, side: str, nproc: int, args: list[str], module: str = "torchtitan.train") -> list[str]:
    """torchrun over torchtitan's trainer (``module``): natively, or through ``torchdevice run`` (the backend in env)."""
    launch = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
              "--local-ranks-filter", "0"]
    trainer = ["-m", module] if side == "native" else ["-m", "torchdevice", "run", "-m", module]
    return [*launch, *trainer, *args]


def environment(side: str, native: Path, nproc: int, digests: Path | None = None) -> dict[str, str]:
    """The run's environment; with ``digests`` (--bitwise) the digest module is importable and writes there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_") and k != "PYTHONPATH"}
    paths = [str(native)] if side == "native" else []
    if digests is not None:
        paths.append(str(DIGESTS))
        env[DIGESTS_VARIABLE] = str(digests)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    if side != "native":
        env["TORCHDEVICE_BACKEND"] = side
    if side == "sim":  # a simulated machine with a device per rank, as a GPU node has (sim's default is 2)
        env["TORCHDEVICE_SIM_DEVICES"] = str(nproc)
    return env


def failure(text: str) -> str:
    """What a failed run died of: its last error or signal line (torchrun's summary names the signal), else its end."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    causes = [line for line in lines if re.search(r"(Error|Exception)\b.*:|Signal \d+", line)]
    return (causes[-1] if causes else " / ".join(lines[-3:]))[-300:]


@dataclass
class Outcome:
    losses: list[tuple[int, str, str]]
    seconds: float
    error: str | None = None
    digests: list[dict] = field(default_factory=list)  # --bitwise: one record a step (peer_torchtitan_digests)


# torchtitan initializes the weights on the device (from its generator: sim's is CUDA's Philox, not the CPU's
# Mersenne Twister), so every run starts from one seed checkpoint, made natively on the CPU
SEED = ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint", "--parallelism.data_parallel_shard_degree", "1"]


def seed_checkpoint(python: str, workdir: Path, native: Path, assets: Path, timeout: float) -> list[str]:
    """The arguments that start a run from the seed checkpoint, made here by one native process."""
    outcome = run(python, "native", "seed", Config(SEED, nproc=1), workdir, native, assets, timeout)
    if outcome.error:
        sys.exit(f"the seed checkpoint failed: {outcome.error}")
    step0 = workdir / "runs" / "seed-native" / "checkpoint" / "step-0"
    return ["--checkpoint.enable", "--checkpoint.initial_load_path", str(step0)]


def run(python: str, side: str, name: str, config: Config, workdir: Path, native: Path, assets: Path,
        timeout: float, start_from: list[str] | None = None, bitwise: bool = False) -> Outcome:
    """One configuration on one side; a resuming configuration runs twice and reports both runs' steps (and
    with ``bitwise`` their tensors' digests)."""
    dump = workdir / "runs" / f"{name}-{side}"
    if dump.exists():
        shutil.rmtree(dump)
    paths = ["--job.dump_folder", str(dump), "--model.hf_assets_path", str(assets / "tokenizer"),
             "--training.dataset_path", str(assets / "c4_test"), *(start_from or [])]
    start = time.perf_counter()
    losses: list[tuple[int, str, str]] = []
    digests: list[dict] = []
    module = DIGESTS_MODULE if bitwise else "torchtitan.train"
    for part, args in enumerate([config.args, config.resume] if config.resume else [config.args]):
        record = dump / f"digests{part}.jsonl" if bitwise else None
        dump.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command(python, side, config.nproc, [*COMMON, *paths, *args], module), cwd=workdir,
                              env=environment(side, native, config.nproc, record), capture_output=True, text=True,
                              timeout=timeout)
        (dump / f"run{part}.out").write_text(done.stdout)
        (dump / f"run{part}.err").write_text(done.stderr)
        if done.returncode != 0:
            return Outcome(losses, time.perf_counter() - start,
                           f"exit {done.returncode}: {failure(done.stdout + done.stderr)}")
        losses += parse_losses(done.stdout + done.stderr)
        if record is not None and record.exists():
            digests += [json.loads(line) for line in record.read_text().splitlines()]
    return Outcome(losses, time.perf_counter() - start, digests=digests)


def cell(outcome: Outcome, native: Outcome | None, bitwise: bool = False) -> tuple[str, bool]:
    """The table's text for one run, and whether it passes (``bitwise``: its tensors' digests compared too)."""
    if outcome.error:
        return f"failed ({outcome.error})", False
    if native is None:  # the native column itself
        ok = bool(outcome.losses)
        last = outcome.losses[-1] if ok else None
        return (f"{len(outcome.losses)} steps, last loss {last[1]}" if last else "no step logged"), ok
    if native.error:
        return "not compared (native failed)", False
    differ = compare(native.losses, outcome.losses)
    if differ is None and bitwise:
        differ = compare_digests(native.digests, outcome.digests, [step for step, _, _ in native.losses])
    equal = f"equal, bitwise ({len(outcome.digests)} steps' parameters and gradients)" if bitwise else "equal"
    return (equal if differ is None else f"differs: {differ}"), differ is None


def table(results: dict[str, dict[str, Outcome]], backends: list[str], bitwise: bool = False) -> tuple[str, bool]:
    """A markdown table (configuration x side, with each run's seconds) and whether every cell passes."""
    lines = ["| config | native | " + " | ".join(backends) + " |", "|---|---|" + "---|" * len(backends)]
    passed = True
    for name, sides in results.items():
        cells = []
        for side in ["native", *backends]:
            if side not in sides:
                cells.append("not run")
                passed = False
                continue
            text, ok = cell(sides[side], None if side == "native" else sides.get("native"), bitwise)
            passed &= ok
            cells.append(f"{text}, {sides[side].seconds:.0f} s")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines), passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True, help="torchtitan's tests/assets (tokenizer/, c4_test/)")
    parser.add_argument("--synthetic-data", action="store_true", help="a seeded stand-in for c4_test")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--backends", default="cpu,sim")
    parser.add_argument("--bitwise", action="store_true",
                        help="compare every step's parameters and gradients bit for bit, not only the logged losses")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".peer" / "torchtitan")
    parser.add_argument("--current-env", action="store_true", help="install torchtitan into this interpreter's env")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per torchrun")
    args = parser.parse_args()
    unknown = set(args.configs.split(",")) - set(CONFIGS)
    if unknown:
        sys.exit(f"unknown configuration(s) {sorted(unknown)}; valid: {', '.join(CONFIGS)}")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    python = install(workdir, args.current_env)
    assets = stage_assets(args.assets.resolve(), workdir, args.synthetic_data)
    native = native_tree(python, workdir)
    start_from = seed_checkpoint(python, workdir, native, assets, args.timeout)
    backends = args.backends.split(",")
    results: dict[str, dict[str, Outcome]] = {}
    for name in args.configs.split(","):
        results[name] = {}
        for side in ["native", *backends]:  # one at a time: each is a multi-process run
            outcome = run(python, side, name, CONFIGS[name], workdir, native, assets, args.timeout, start_from,
                          args.bitwise)
            results[name][side] = outcome
            print(f"{name} {side}: {len(outcome.losses)} steps in {outcome.seconds:.0f} s"
                  + (f"; {outcome.error}" if outcome.error else ""), flush=True)
    text, passed = table(results, backends, args.bitwise)
    print(text)
    print(f"whole peer run: {time.perf_counter() - start:.0f} s; logs in {workdir / 'runs'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

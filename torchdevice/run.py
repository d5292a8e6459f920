"""``torchdevice run``: run a program written for CUDA (or MPS, XPU, MTIA) unmodified on the active backend.

::

    torchdevice run [--backend NAME] [--source FAMILY] [--devices N] [--report FILE] SCRIPT [ARGS...]
    torchdevice run [--backend NAME] [--source FAMILY] [--devices N] [--report FILE] -m MODULE [ARGS...]
    python -m torchdevice run ...

It behaves like ``python SCRIPT ARGS`` (or ``python -m MODULE ARGS``):

* ``sys.argv`` is ``[SCRIPT, *ARGS]`` (``-m``: the module's file, as Python
  sets it, and ``['-m', *ARGS]`` while its parent packages are imported, as
  under ``python -m``); everything after SCRIPT/MODULE is the program's, so
  ``torchdevice run train.py --lr 3 --report x`` passes ``--lr 3 --report x``
  through;
* the program runs as ``__main__`` in a fresh module, with ``__file__``,
  ``__loader__``/``__spec__`` as Python sets them; ``sys.path[0]`` is the
  script's directory (``-m``: the current directory);
* the exit status is the program's: 0 at the end, ``n`` for ``sys.exit(n)``,
  1 after an uncaught exception, whose traceback (through ``sys.excepthook``)
  starts at the program's own frame, with no torchdevice frames above it.

Before the program starts, translation is turned on against the active
backend (``--backend NAME`` chooses it, as ``TORCHDEVICE_BACKEND`` does), and
``TORCHDEVICE_BACKEND`` is exported with the backend's name: child processes
(DataLoader workers, ``torch.multiprocessing.spawn``, ``torchrun``, plain
``subprocess`` Pythons) turn the same translation on when they import torch,
through the ``torch.backends`` entry point (:mod:`torchdevice.autoload`).
``TORCHDEVICE_LOG=info|debug`` logs each translated call site once.

``--source FAMILY`` (``cuda``, ``mps``, ``xpu``, ``mtia``) is the family the
program is written for, the only one whose ``is_available()`` reports a
device (see :mod:`torchdevice.namespaces`); it is exported as
``TORCHDEVICE_SOURCE`` to the program and its children. Without the flag or
the variable, the main script is scanned (:mod:`torchdevice.scan`, nothing
is run): a script whose accelerator uses all belong to one family other than
cuda (``torch.backends.mps.is_available()``, ``"mps"``) gets that family;
anything else -- cuda uses, several families, none, ``-m MODULE``, a
directory or zip -- gets ``cuda``.

``--devices N`` gives a host backend (cpu, mlx) N logical devices, all the
same host, exported as ``TORCHDEVICE_DEVICE_COUNT`` so that children agree:
``torch.cuda.device_count()`` is N and ``cuda:0`` .. ``cuda:N-1`` are valid
(``mp.spawn(fn, nprocs=torch.cuda.device_count())`` starts N processes).
Without it, ``TORCHDEVICE_DEVICE_COUNT``, else a launcher's ``LOCAL_WORLD_SIZE``,
decides. A backend with devices of its own keeps its real count.

``--report FILE`` writes, when the program ends (normally, by ``sys.exit`` or
by an exception), which translated APIs it called, how many times, from
which call sites and how each was handled: JSON if FILE ends in ``.json``,
Markdown otherwise. Without ``--report`` nothing is counted (the wrappers
only test ``trace.active``). The report covers the ``torchdevice run``
process itself; child processes are not counted. Under ``torchrun ... -m
torchdevice run --report r.json`` every rank is its own ``torchdevice run``
and writes ``r.rank<RANK>.json``.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .router import Target
    from .trace import APIUse

    #: a prepared program: its code and the ``__main__`` module it runs in
    Prepared = tuple[types.CodeType, types.ModuleType]

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .vocabulary import SOURCE_FAMILIES

    parser.usage = (
        "torchdevice run [-h] [--backend NAME] [--source FAMILY] [--devices N] [--report FILE] SCRIPT [ARGS...]\n"
        "       torchdevice run [-h] [--backend NAME] [--source FAMILY] [--devices N] [--report FILE] "
        "-m MODULE [ARGS...]"
    )
    parser.add_argument("--backend", metavar="NAME",
                        help="backend to run on (default: TORCHDEVICE_BACKEND, else automatic selection)")
    parser.add_argument("--source", metavar="FAMILY", type=str.lower, choices=SOURCE_FAMILIES,
                        help="the device family the program is written for, the only one reporting a device: "
                             f"{', '.join(SOURCE_FAMILIES)} (default: TORCHDEVICE_SOURCE, else inferred from the "
                             "script, else cuda); exported as TORCHDEVICE_SOURCE")
    parser.add_argument("--devices", metavar="N", type=_device_count_arg,
                        help="logical devices of a host backend (cpu, mlx), exported as TORCHDEVICE_DEVICE_COUNT "
                             "(default: TORCHDEVICE_DEVICE_COUNT, else LOCAL_WORLD_SIZE, else 1)")
    parser.add_argument("--report", metavar="FILE",
                        help="when the program ends, write the translated APIs it called to FILE "
                             "(JSON if it ends in .json, else Markdown)")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run library module MODULE as a script, like python -m")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT|MODULE [ARGS...]",
                        help="the program and its arguments, passed through unchanged")


def main(args: argparse.Namespace) -> int:
    """Entry of the ``run`` subcommand (see the module docstring)."""
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        what = "MODULE" if args.module else "SCRIPT"
        print(f"torchdevice run: error: missing {what} (usage: torchdevice run [options] "
              f"{'-m MODULE' if args.module else 'SCRIPT'} [ARGS...])", file=sys.stderr)
        return EXIT_USAGE
    return run(program[0], program[1:], module=args.module, backend=args.backend, report=args.report,
               source=args.source, devices=args.devices)


def _device_count_arg(value: str) -> int:
    """``--devices``: a whole number of at least 1 (argparse names the option and the value otherwise)."""
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of devices (a whole number of at least 1)")
    return count


def infer_source(path: str) -> tuple[str | None, str]:
    """The source family script ``path`` is written for, by a static scan, and why (None: the default).

    A family other than cuda only when every accelerator use the scan finds
    in the script belongs to it; cuda uses, several families, none, or a
    file that cannot be read or parsed give None.
    """
    from . import scan

    if not os.path.isfile(path):
        return None, "not a script file"
    try:
        with open(path, "rb") as f:
            uses = scan.scan_source(f.read(), path)
    except (OSError, SyntaxError, ValueError) as exc:
        return None, f"cannot scan the script ({type(exc).__name__})"
    found = scan.families(uses)
    if len(found) == 1 and found != {"cuda"}:
        (family,) = found
        return family, f"the script uses {family} only"
    if not found:
        return None, "the script names no accelerator family"
    return None, f"the script uses {', '.join(sorted(found))}"


def _activate(backend: str | None, source: str | None = None, devices: int | None = None,
              program: str | None = None) -> Target:
    """Select ``backend`` (if given), turn translation on, export it to children; return the Target.

    ``source`` / ``devices``: ``--source`` / ``--devices`` (exported as
    ``TORCHDEVICE_SOURCE`` / ``TORCHDEVICE_DEVICE_COUNT``); ``program``: the
    script to infer the source family from when neither flag nor variable names one.
    """
    from . import autoload, router, trace, translate
    from .errors import ConfigError
    from .streams import ENV_DEVICE_COUNT

    if source is not None:
        source = translate.check_source(source, "--source")
    if devices is not None:
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise ConfigError("--devices", str(devices), "give a whole number of at least 1")
        os.environ[ENV_DEVICE_COUNT] = str(devices)
        router.invalidate()
    if backend is not None:
        router.check(backend, "--backend")
        os.environ[router.ENV_BACKEND] = backend
        router.invalidate()  # re-resolves (and re-installs translation if autoload already turned it on)
    how = "--source"
    if source is None:
        if os.environ.get(translate.ENV_SOURCE, "").strip():
            source, how = translate.source_default(), translate.ENV_SOURCE
        elif program is not None:
            inferred, why = infer_source(program)
            source, how = inferred or translate.DEFAULT_SOURCE, f"inferred: {why}"
        else:
            source, how = translate.DEFAULT_SOURCE, "the default"
    target = translate.patch(source=source)
    for note in router.passed_over():  # once: children get the chosen backend by name
        print(f"torchdevice run: warning: automatic selection chose {target.name!r} after passing over {note}",
              file=sys.stderr)
    # children: same backend, same source family, and never opted out
    os.environ[router.ENV_BACKEND] = target.name
    os.environ[translate.ENV_SOURCE] = target.source
    if os.environ.get(autoload.ENV_AUTO, "").strip().lower() in autoload._FALSE:
        del os.environ[autoload.ENV_AUTO]
    trace.configure_logging()
    trace.logger.info("torchdevice run: translating %s to backend %r (%s); source family %s (%s), %d device(s)",
                      ", ".join(sorted(target.sources)), target.name, target.device_type, target.source, how,
                      target.device_count)
    return target


def run(target_name: str, argv: list[str], *, module: bool = False, backend: str | None = None,
        report: str | None = None, source: str | None = None, devices: int | None = None) -> int:
    """Run script (or, with ``module=True``, module) ``target_name`` with arguments ``argv`` translated.

    ``source`` and ``devices`` are ``--source`` and ``--devices`` (see the module docstring).
    Returns the exit status; ``SystemExit`` raised by the program propagates
    (after the report is written), as it would out of ``python SCRIPT``.
    """
    from . import trace
    from .errors import TorchDeviceError

    try:
        target = _activate(backend, source, devices, None if module else target_name)
    except (TorchDeviceError, ValueError) as exc:
        print(f"torchdevice run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a broken installer or plugin: say what, without running the program
        print(f"torchdevice run: error: could not turn translation on: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_USAGE

    if module:
        prepared = _prepare_module(target_name, argv)
    else:
        prepared = _prepare_script(target_name, argv)
    if isinstance(prepared, int):
        return prepared
    code, main_module = prepared

    if report is not None:
        report = _per_rank(os.path.abspath(report))  # absolute: the program may chdir
        cwd = os.getcwd()
        trace.reset()
        trace.start_report()
    started = time.time()
    status = 0
    try:
        sys.modules["__main__"] = main_module
        exec(code, main_module.__dict__)
    except SystemExit as exc:
        exit_code = exc.code
        status = 0 if exit_code is None else exit_code if isinstance(exit_code, int) else 1
        raise
    except KeyboardInterrupt:
        status = 130  # what a shell reports for a Python killed by SIGINT
        raise
    except BaseException as exc:  # noqa: BLE001 - what `python SCRIPT` does with an uncaught exception
        status = 1
        _print_uncaught(exc)
        return 1
    finally:
        if report is not None:
            trace.stop_report()
            _write_report_safely(report, target, [target_name, *argv], module, status,
                                 time.time() - started, cwd)
    return 0


# -- preparing the program --------------------------------------------------------------


def _prepare_script(path: str, argv: list[str]) -> Prepared | int:
    if os.path.isdir(path) or (os.path.isfile(path) and not path.endswith(".py") and _is_zip(path)):
        return _prepare_runpy_path(path, argv)
    abspath = os.path.abspath(path)
    try:
        with io.open_code(abspath) as f:
            source = f.read()
    except OSError as exc:
        print(f"torchdevice run: can't open file {abspath!r}: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = compile(source, abspath, "exec", dont_inherit=True)
    except SyntaxError as exc:
        _print_uncaught(exc)
        return 1
    from importlib.machinery import SourceFileLoader

    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(
        __file__=abspath, __cached__=None, __loader__=SourceFileLoader("__main__", abspath),
        __package__=None, __spec__=None, __builtins__=__builtins__,
    )
    sys.argv[:] = [path, *argv]
    _set_path0(os.path.dirname(os.path.realpath(abspath)))
    return code, main_module


def _set_path0(entry: str) -> None:
    """Put the program's directory where Python would: in place of torchdevice's own ``sys.path[0]``.

    Under ``python -P`` / ``PYTHONSAFEPATH`` Python adds no such entry, and neither do we.
    """
    if getattr(sys.flags, "safe_path", False):
        return
    sys.path[0:1] = [entry]


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _prepare_runpy_path(path: str, argv: list[str]) -> Prepared:
    """A directory or zip file with ``__main__.py``: run through runpy, as Python does."""
    sys.argv[:] = [path, *argv]
    if not getattr(sys.flags, "safe_path", False):
        del sys.path[0]  # runpy.run_path puts the directory or archive there while it runs
    code = compile("import runpy as _r\n_r.run_path(_p, run_name='__main__')\n", "<torchdevice run>", "exec")
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(_p=path, __builtins__=__builtins__, __spec__=None)
    return code, main_module


def _prepare_module(name: str, argv: list[str]) -> Prepared | int:
    import runpy

    _set_path0(os.getcwd())
    # as `python -m`: the parent packages import with sys.argv ['-m', *ARGS] (a package may parse its
    # arguments at import, as torchtitan does), then argv[0] becomes the module's file
    sys.argv[:] = ["-m", *argv]
    try:
        mod_name, spec, code = runpy._get_module_details(name, ImportError)  # type: ignore[attr-defined]
    except ImportError as exc:
        print(f"torchdevice run: {exc}", file=sys.stderr)
        return 1
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(
        __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader,
        __package__=spec.parent, __spec__=spec, __builtins__=__builtins__,
    )
    sys.argv[:] = [spec.origin or name, *argv]
    return code, main_module


# -- uncaught exceptions ------------------------------------------------------------------------


def _print_uncaught(exc: BaseException) -> None:
    """Hand ``exc`` to ``sys.excepthook`` with the torchdevice frames above the program removed."""
    tb = exc.__traceback__
    ours = {os.path.abspath(__file__)}
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in ours:
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and tb is None:
        exc.__traceback__ = None
    else:
        exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except Exception:  # a broken user hook: fall back to the default one
        sys.__excepthook__(type(exc), exc, exc.__traceback__)


# -- the report -------------------------------------------------------------------------------------


def _per_rank(path: str) -> str:
    """Under torchrun (``WORLD_SIZE`` > 1) each rank writes its own report: ``r.json`` -> ``r.rank1.json``."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
    if rank is None or world in ("", "1"):
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def _split_how(how: str) -> tuple[str, str]:
    status, sep, note = how.partition(":")
    return (status.strip(), note.strip()) if sep else (how.strip(), "")


def _display_site(site: str, cwd: str) -> str:
    filename, sep, line = site.rpartition(":")
    if not sep:
        return site
    if os.path.isabs(filename):
        rel = os.path.relpath(filename, cwd)
        if not rel.startswith(".."):
            filename = rel
    return f"{filename}:{line}"


def _other_family_of(api: str, target: Target) -> str | None:
    """The translated family ``api`` belongs to when it is not the source (``torch.xpu.manual_seed_all``
    in a CUDA program: ``"xpu"``), else None."""
    parts = api.split(".")
    if len(parts) < 3 or parts[0] != "torch":
        return None
    family = parts[2] if parts[1] == "backends" else parts[1]
    return family if family in target.sources and family != target.source else None


def _other_family_probe(api: str, target: Target) -> str | None:
    """The family ``api`` probes for a device when that family is translated but not the source
    (``torch.xpu.is_available`` in a CUDA program: ``"xpu"``), else None."""
    from . import trace

    parts = api.split(".")
    backends = parts[1:2] == ["backends"]
    if len(parts) != (4 if backends else 3) or parts[-1] not in (trace.BACKEND_PROBES if backends else trace.PROBES):
        return None
    return _other_family_of(api, target)


def _probes_per_family(calls: dict[str, int], target: Target) -> dict[str, int]:
    found: dict[str, int] = {}
    for api, n in calls.items():
        family = _other_family_probe(api, target) or api.split(".")[-2]
        found[family] = found.get(family, 0) + n
    return dict(sorted(found.items()))


def _api_entry(use: APIUse, cwd: str, via: str | None = None) -> dict:
    handled, note = _split_how(use.how)
    sites = [{"site": _display_site(site, cwd), "calls": n} for site, n in use.sites.most_common()]
    entry = {"api": use.api, "handled": handled, "note": note, "calls": use.calls, "sites": sites}
    return {"via": via, **entry} if via is not None else entry


def report_dict(target: Target, command: list[str], module: bool, status: int, duration: float,
                cwd: str | None = None) -> dict:
    """The report as a JSON-ready dict (see :func:`write_report`); sites are shown relative to ``cwd``."""
    from . import __version__, trace

    cwd = cwd or os.getcwd()
    apis = []
    by_status: dict[str, dict[str, int]] = {}
    named: dict[str, set[str]] = {}  # handled as -> the APIs (one API handled two ways is two rows, one API)
    for use in trace.report_data():
        entry = _api_entry(use, cwd)
        apis.append(entry)
        agg = by_status.setdefault(entry["handled"], {"apis": 0, "calls": 0})
        named.setdefault(entry["handled"], set()).add(use.api)
        agg["apis"] = len(named[entry["handled"]])
        agg["calls"] += use.calls
    via_torch: list[dict] = []
    via_torch_other: dict[str, int] = {}
    for via, use in trace.made_by_torch_uses():
        family = _other_family_of(use.api, target)
        if family is None:
            via_torch.append(_api_entry(use, cwd, via=via))
        else:  # torch.manual_seed seeding every family: the program never used that family, so not listed
            via_torch_other[family] = via_torch_other.get(family, 0) + use.calls
    return {
        "torchdevice": __version__,
        "command": (["python", "-m"] if module else ["python"]) + list(command),
        "backend": target.name,
        "device_type": target.device_type,
        "translated_sources": sorted(target.sources),
        "source": target.source,
        "exit_status": status,
        "duration_s": round(duration, 3),
        "total_calls": sum(a["calls"] for a in apis),
        "by_handling": by_status,
        "apis": apis,
        # calls torch made while running a torch function the program called (torch.manual_seed seeds
        # every device family): counted per that function, not listed as the program's API uses
        "made_by_torch": trace.made_by_torch(),
        # the same calls one by one: each inner API with its real handling, and the program's lines that
        # called the torch function ("torch.mps.manual_seed via torch.manual_seed at prog.py:3")
        "made_by_torch_apis": via_torch,
        # ... except those of the families the program is not written for: counted per family, not listed
        "made_by_torch_other_families": dict(sorted(via_torch_other.items())),
        # availability probes of the families the program is not written for, answered "not here", per family
        "other_family_probes": _probes_per_family(trace.other_family_probe_calls(), target),
        # what plugins count themselves (the mlx plugin: ATen ops that fell back to torch on the host)
        "sections": trace.sections(),
        "note": "counts the torchdevice run process; child processes are not included",
    }


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_markdown(data: dict, max_sites: int = 10) -> str:
    import shlex

    out = ["# torchdevice run report", ""]
    out.append(f"- Command: `{shlex.join(data['command'])}`")
    out.append(f"- Backend: `{data['backend']}` (device type `{data['device_type']}`), translating "
               + ", ".join(f"`{s}`" for s in data["translated_sources"])
               + (f"; source family `{data['source']}`" if data.get("source") else ""))
    out.append(f"- Exit status: {data['exit_status']}")
    out.append(f"- Duration: {data['duration_s']:.2f} s")
    out.append(f"- Translated APIs called: {len({a['api'] for a in data['apis']})} ({data['total_calls']} calls)")
    out.append(f"- torchdevice {data['torchdevice']}; {data['note']}")
    if data.get("other_family_probes"):
        out.append(f"- Device probes of other families (answered: no device; only the source family "
                   f"`{data.get('source')}` claims one): "
                   + ", ".join(f"`{_md_cell(f)}` {n}" for f, n in data["other_family_probes"].items()))
    if data.get("made_by_torch"):
        line = ("- Translated calls torch made on the program's behalf (listed apart, last): "
                + ", ".join(f"{n} by `{_md_cell(f)}`" for f, n in data["made_by_torch"].items()))
        others = data.get("made_by_torch_other_families") or {}
        if others:
            line += ("; of these, calls for the families the program is not written for, counted, not listed: "
                     + ", ".join(f"{_md_cell(f)} {n}" for f, n in others.items()))
        out.append(line)
    out.append("")
    for name, counts in (data.get("sections") or {}).items():
        out += [f"## {_md_cell(name)}", "", "| what | count |", "|---|---:|"]
        out += [f"| `{_md_cell(k)}` | {v} |" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                if isinstance(v, int)] or [f"| {_md_cell(counts)} | |"]
        out.append("")
    if not data["apis"]:
        out.append("The program called no translated API.")
        return "\n".join(out + _md_made_by_torch(data, max_sites)) + "\n"
    out += ["## By handling", "", "| handled as | APIs | calls |", "|---|---:|---:|"]
    for handled, agg in sorted(data["by_handling"].items(), key=lambda kv: -kv[1]["calls"]):
        out.append(f"| {_md_cell(handled)} | {agg['apis']} | {agg['calls']} |")
    out += ["", "## APIs", "", "| API | calls | handled as | call sites |", "|---|---:|---|---|"]
    for api in data["apis"]:
        out.append(f"| `{_md_cell(api['api'])}` | {api['calls']} | {_md_handled(api)} | {_md_sites(api, max_sites)} |")
    return "\n".join(out + _md_made_by_torch(data, max_sites)) + "\n"


def _md_handled(api: dict) -> str:
    return _md_cell(api["handled"] + (f": {api['note']}" if api["note"] else ""))


def _md_sites(api: dict, max_sites: int) -> str:
    sites = ", ".join(f"`{_md_cell(s['site'])}` ({s['calls']})" for s in api["sites"][:max_sites])
    if len(api["sites"]) > max_sites:
        sites += f", and {len(api['sites']) - max_sites} more"
    return sites


def _md_made_by_torch(data: dict, max_sites: int) -> list[str]:
    entries = data.get("made_by_torch_apis") or []
    if not entries:
        return []
    out = ["", "## Called by torch on the program's behalf", "",
           "The program called the torch function in the second column; torch called the translated API itself. "
           "Call sites are the program's calls of that torch function.", "",
           "| API | via | calls | handled as | call sites |", "|---|---|---:|---|---|"]
    for api in entries:
        out.append(f"| `{_md_cell(api['api'])}` | `{_md_cell(api['via'])}` | {api['calls']} | {_md_handled(api)} "
                   f"| {_md_sites(api, max_sites)} |")
    return out


def write_report(path: str, data: dict) -> None:
    """Write ``data`` to ``path``: JSON if it ends in ``.json``, Markdown otherwise."""
    text = json.dumps(data, indent=2) + "\n" if path.lower().endswith(".json") else format_markdown(data)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _write_report_safely(path: str, target: Target, command: list[str], module: bool, status: int,
                         duration: float, cwd: str | None) -> None:
    try:
        write_report(path, report_dict(target, command, module, status, duration, cwd))
    except Exception as exc:  # never mask the program's own outcome
        print(f"torchdevice run: could not write report {path!r}: {type(exc).__name__}: {exc}", file=sys.stderr)

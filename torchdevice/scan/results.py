"""What a scan finds: :class:`Use`, :class:`ScanError`, :class:`ScanReport`, the statuses and
their order (``--fail-on``), and the accelerator family of a use."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable

#: Best to worst; ``--fail-on S`` fails on S and everything after it.
SEVERITY = ("native", "translated", "no-op", "emulated", "unsupported")
UNKNOWN = "unknown"
#: Every status a use can have, in report order.
STATUSES = SEVERITY + (UNKNOWN,)


# -- families ------------------------------------------------------------------------

#: word of a use's name -> the accelerator family (source device type) it belongs to
_FAMILY_WORDS = {
    "cuda": "cuda", "cudnn": "cuda", "nccl": "cuda", "cublas": "cuda", "cublaslt": "cuda", "cudart": "cuda",
    "nvidia": "cuda", "mps": "mps", "xpu": "xpu", "xccl": "xpu", "mtia": "mtia",
}


def family_of(use: "Use") -> str | None:
    """The accelerator family a use belongs to: ``cuda``, ``mps``, ``xpu``, ``mtia``, or None.

    Read from the words of its name: ``torch.backends.mps.is_available`` and
    ``device:mps`` are mps, ``dist-backend:xccl`` xpu, ``torch.backends.cudnn.benchmark``,
    ``env:NCCL_DEBUG`` and ``torch.utils.cpp_extension.CUDAExtension`` cuda.
    """
    for word in re.split(r"[^a-z0-9]+", use.api.lower()):
        family = _FAMILY_WORDS.get(word)
        if family is None and word.startswith("cuda"):
            family = "cuda"
        if family is not None:
            return family
    return None


def families(uses: Iterable["Use"]) -> set[str]:
    """Every accelerator family the uses belong to (see :func:`family_of`)."""
    found = {family_of(u) for u in uses}
    found.discard(None)
    return found  # type: ignore[return-value]


# -- results --------------------------------------------------------------------


@dataclass
class Use:
    """One accelerator-specific use found in a source file."""

    path: str
    line: int  #: 1-based
    col: int  #: 1-based, in characters
    api: str  #: canonical name (dotted, aliases resolved) or a pseudo-API name, see the module doc
    kind: str  #: namespace, method, attribute, device, dist-backend, tensor-type, env
    context: str = ""  #: where it sits: call, attribute, assign, reference, device=, .to(), torch.device, ...
    detail: str = ""  #: the literal, for string uses
    code: str = ""  #: the source line, stripped and shortened
    status: str = UNKNOWN
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScanError:
    """A file that could not be read or parsed."""

    path: str
    line: int | None
    message: str
    kind: str  #: "syntax" (cannot be parsed), "read" (cannot be read), "internal" (a scanner bug)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScanReport:
    paths: list[str]
    backend: str | None
    uses: list[Use] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    files_scanned: int = 0
    elapsed_s: float = 0.0
    backend_note: str = ""

    def by_status(self) -> dict[str, int]:
        counts = Counter(u.status for u in self.uses)
        out = {s: counts.pop(s, 0) for s in STATUSES}
        out.update(sorted(counts.items()))  # any status matrix.py adds later
        return out

    def by_api(self) -> list[dict]:
        counts = Counter(u.api for u in self.uses)
        first: dict[str, Use] = {}
        for u in self.uses:
            first.setdefault(u.api, u)
        return [
            {"api": api, "count": n, "status": first[api].status, "note": first[api].note}
            for api, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    def summary(self) -> dict:
        return {
            "files_scanned": self.files_scanned,
            "files_with_uses": len({u.path for u in self.uses}),
            "files_with_errors": len(self.errors),
            "uses": len(self.uses),
            "by_status": self.by_status(),
            "by_api": self.by_api(),
        }

    def as_dict(self) -> dict:
        from .. import __version__

        return {
            "schema": 1,
            "torchdevice": __version__,
            "backend": self.backend,
            "backend_note": self.backend_note,
            "paths": list(self.paths),
            "elapsed_s": round(self.elapsed_s, 3),
            "summary": self.summary(),
            "uses": [u.as_dict() for u in self.uses],
            "errors": [e.as_dict() for e in self.errors],
        }

    def failing(self, fail_on: Iterable[str]) -> list[Use]:
        """The uses whose status matches ``--fail-on`` (see :func:`parse_fail_on`)."""
        wanted = set(fail_on)
        return [u for u in self.uses if u.status in wanted]


def parse_fail_on(spec: str) -> set[str]:
    """Turn ``"emulated"`` or ``"unsupported,unknown"`` into the set of statuses that fail.

    Each status in :data:`SEVERITY` brings every worse one with it;
    ``unknown`` and ``error`` match only themselves. Raises ``ValueError``.
    """
    out: set[str] = set()
    for item in filter(None, (p.strip().lower() for p in spec.split(","))):
        item = {"noop": "no-op", "errors": "error"}.get(item, item)
        if item in SEVERITY:
            out.update(SEVERITY[SEVERITY.index(item):])
        elif item in (UNKNOWN, "error"):
            out.add(item)
        else:
            allowed = ", ".join(SEVERITY + (UNKNOWN, "error"))
            raise ValueError(f"unknown status {item!r} (choose from {allowed})")
    if not out:
        raise ValueError("no status given")
    return out

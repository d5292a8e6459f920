"""Makers of :mod:`torchdevice.forwarding` kept as source: the patterns activating the built-in CPU
backend uses (compiling them cost a millisecond or two of every activation). Written by
``python scripts/forwarding_made.py``; do not edit. Each ``make_N`` is the source that is its key in
:data:`MADE`, renamed.
"""

from __future__ import annotations

from typing import Any, Callable


def make_0(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:
    def function() -> object:
        if _internal(_getframe(1).f_code.co_filename):
            return _real()
        return _translated()
    return function


def make_1(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:
    def function(*_a0: object) -> object:
        if _internal(_getframe(1).f_code.co_filename):
            return _real(*_a0)
        return _translated(*_a0)
    return function


def make_2(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:
    def function(*_a0: object, **_a1: object) -> object:
        if _internal(_getframe(1).f_code.co_filename):
            return _real(*_a0, **_a1)
        return _translated(*_a0, **_a1)
    return function


def make_3(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:
    def function(_a0: object) -> object:
        if _internal(_getframe(1).f_code.co_filename):
            return _real(_a0)
        return _translated(_a0)
    return function


def make_4(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:
    def function(_a0: object, /) -> object:
        if _internal(_getframe(1).f_code.co_filename):
            return _real(_a0)
        return _translated(_a0)
    return function


def make_5(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:
    def function(_a0: object) -> object:
        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):
            _trace.note(api, how)
        return method(_a0)
    return function


def make_6(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object) -> object:
        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):
            _trace.note(api, how)
        return method(_a0, _a1)
    return function


def make_7(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object, **_a3: object) -> object:
        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):
            _trace.note(api, how)
        return method(_a0, _a1, _a2, **_a3)
    return function


def make_8(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object, _a3: object) -> object:
        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):
            _trace.note(api, how)
        return method(_a0, _a1, _a2, _a3)
    return function


def make_9(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function() -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl()
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_10(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(*_a0: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(*_a0)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_11(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_12(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, *_a1: object, **_a2: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, *_a1, **_a2)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_13(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, /) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_14(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_15(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, *, out: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1, out=out)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_16(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1, _a2)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_17(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object, *, out: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1, _a2, out=out)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_18(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object, _a3: object, _a4: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1, _a2, _a3, _a4)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


def make_19(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:
    def function(_a0: object, _a1: object, _a2: object, _a3: object, _a4: object, *, out: object) -> object:
        if _trace.active:
            _trace.note(api, how)
        try:
            return impl(_a0, _a1, _a2, _a3, _a4, out=out)
        except _RENAMED as exc:
            _rename(api, exc)
            raise
    return function


#: the source forwarding.maker builds -> the function written from it
MADE: dict[str, Callable[..., Callable[..., object]]] = {
    'def make(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:\n    def function() -> object:\n        if _internal(_getframe(1).f_code.co_filename):\n            return _real()\n        return _translated()\n    return function\n': make_0,
    'def make(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:\n    def function(*_a0: object) -> object:\n        if _internal(_getframe(1).f_code.co_filename):\n            return _real(*_a0)\n        return _translated(*_a0)\n    return function\n': make_1,
    'def make(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:\n    def function(*_a0: object, **_a1: object) -> object:\n        if _internal(_getframe(1).f_code.co_filename):\n            return _real(*_a0, **_a1)\n        return _translated(*_a0, **_a1)\n    return function\n': make_2,
    'def make(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:\n    def function(_a0: object) -> object:\n        if _internal(_getframe(1).f_code.co_filename):\n            return _real(_a0)\n        return _translated(_a0)\n    return function\n': make_3,
    'def make(_getframe: Any, _internal: Any, _real: Any, _translated: Any) -> Callable[..., object]:\n    def function(_a0: object, /) -> object:\n        if _internal(_getframe(1).f_code.co_filename):\n            return _real(_a0)\n        return _translated(_a0)\n    return function\n': make_4,
    'def make(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:\n    def function(_a0: object) -> object:\n        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):\n            _trace.note(api, how)\n        return method(_a0)\n    return function\n': make_5,
    'def make(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object) -> object:\n        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):\n            _trace.note(api, how)\n        return method(_a0, _a1)\n    return function\n': make_6,
    'def make(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object, **_a3: object) -> object:\n        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):\n            _trace.note(api, how)\n        return method(_a0, _a1, _a2, **_a3)\n    return function\n': make_7,
    'def make(_trace: Any, _getframe: Any, api: Any, how: Any, method: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object, _a3: object) -> object:\n        if _trace.active and not _trace.translation_code(_getframe(1).f_code.co_filename):\n            _trace.note(api, how)\n        return method(_a0, _a1, _a2, _a3)\n    return function\n': make_8,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function() -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl()\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_9,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(*_a0: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(*_a0)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_10,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_11,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, *_a1: object, **_a2: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, *_a1, **_a2)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_12,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, /) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_13,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_14,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, *, out: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1, out=out)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_15,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1, _a2)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_16,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object, *, out: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1, _a2, out=out)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_17,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object, _a3: object, _a4: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1, _a2, _a3, _a4)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_18,
    'def make(_trace: Any, api: Any, how: Any, impl: Any, _RENAMED: Any, _rename: Any) -> Callable[..., object]:\n    def function(_a0: object, _a1: object, _a2: object, _a3: object, _a4: object, *, out: object) -> object:\n        if _trace.active:\n            _trace.note(api, how)\n        try:\n            return impl(_a0, _a1, _a2, _a3, _a4, out=out)\n        except _RENAMED as exc:\n            _rename(api, exc)\n            raise\n    return function\n': make_19,
}

"""Placeholder: installed by torchdevice.translate.patch(); filled in by its own issue."""


def install(patcher, target) -> None:
    """Patch torch for translation through ``patcher`` (see torchdevice.translate)."""

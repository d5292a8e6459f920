"""The project's old public names: each keeps answering through one alias that warns, naming its new home."""
from __future__ import annotations

import pytest

from torchdevice import translate, vocabulary


def test_source_types_is_the_source_families_with_a_warning():
    with pytest.warns(DeprecationWarning, match="torchdevice.vocabulary.SOURCE_FAMILIES"):
        assert translate.SOURCE_TYPES == vocabulary.SOURCE_FAMILIES
    with pytest.raises(AttributeError, match="NO_SUCH_NAME"):
        translate.NO_SUCH_NAME  # noqa: B018

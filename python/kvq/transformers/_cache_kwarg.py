"""The name of the cache argument of generate and forward in the installed transformers.

transformers 5.24 renamed ``past_key_values=`` to ``cache=`` in
``model.generate`` (old name to be removed in 6.0) and in the models'
``forward`` (to be removed in 5.40); 5.24 still takes the old name, with a
FutureWarning, and 5.23 and earlier know only ``past_key_values``.
"""
from __future__ import annotations

from typing import Any

import transformers
from packaging.version import Version  # a dependency of transformers

#: The first transformers release whose generate and forward take ``cache=``.
CACHE_KWARG_SINCE = Version("5.24")


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """``{"cache": cache}`` for transformers >= 5.24, else ``{"past_key_values": cache}``.

    Use as ``model.generate(ids, **cache_kwargs(cache), max_new_tokens=64)``
    or ``model(input_ids=ids, **cache_kwargs(cache))``.
    """
    name = "cache" if Version(transformers.__version__).release[:2] >= CACHE_KWARG_SINCE.release else "past_key_values"
    return {name: cache}

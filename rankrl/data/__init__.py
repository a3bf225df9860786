"""Benchmark loaders: every data set as the same ``Benchmark`` record.

``load_benchmark(name, data_dir, **kwargs)`` looks ``name`` up in ``BENCHMARKS`` and calls its
loader; files live under ``data_dir/<folder>/`` with the folder names of the shared data copy
(``trec_dl``, ``bright``, ``musique`` ...), put there by ``python -m rankrl.data.prepare``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rankrl.data.common import split_corpus
from rankrl.data.errors import MalformedDataError, MissingDataError
from rankrl.data.images import load_cirr, load_coco_cn, load_cvlue, load_flickr30k_cn
from rankrl.data.images_web import load_wiki_image, load_xm3600
from rankrl.data.products import load_wands
from rankrl.data.qa import load_hotpotqa, load_musique
from rankrl.data.records import Benchmark, Document, Qrels, Query, Run
from rankrl.data.recsys import load_lastfm, load_movielens
from rankrl.data.trec import BRIGHT_TASKS, load_bright, load_msmarco_train, load_trec_dl

Loader = Callable[..., Benchmark]

BENCHMARKS: dict[str, Loader] = {
    "dl19": partial(load_trec_dl, name="dl19"),
    "dl20": partial(load_trec_dl, name="dl20"),
    "msmarco-train": load_msmarco_train,
    **{f"bright-{task}": partial(load_bright, task=task) for task in BRIGHT_TASKS},
    "musique": load_musique,
    "hotpotqa": load_hotpotqa,
    "movielens-100k": load_movielens,
    "lastfm": load_lastfm,
    "wands": load_wands,
    "coco-cn": load_coco_cn,
    "cirr": load_cirr,
    "flickr30k-cn": load_flickr30k_cn,
    "cvlue": load_cvlue,
    "xm3600": load_xm3600,
    "wiki-image": load_wiki_image,
}


def load_benchmark(name: str, data_dir: str | Path, **kwargs: Any) -> Benchmark:
    """Load benchmark ``name`` from ``data_dir``; ``kwargs`` go to its loader (see ``BENCHMARKS``).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
        TypeError: an option the loader does not take (the message lists those it does).
        MissingDataError / MalformedDataError: a data file is absent / unreadable.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(sorted(BENCHMARKS))}")
    loader = BENCHMARKS[name]
    options = [p for p in inspect.signature(loader).parameters if p not in ("data_dir", "name", "task")]
    unknown = sorted(set(kwargs) - set(options))
    if unknown:
        raise TypeError(f"benchmark {name!r} takes no option {unknown}; valid options: {options}")
    return loader(Path(data_dir), **kwargs)


__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "Document",
    "MalformedDataError",
    "MissingDataError",
    "Qrels",
    "Query",
    "Run",
    "load_benchmark",
    "split_corpus",
]

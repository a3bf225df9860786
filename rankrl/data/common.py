"""Readers and seeded helpers that every loader shares.

Each reader wraps parsing so that any failure becomes a ``MalformedDataError`` naming the file
(and the line, where there is one). Randomness is always drawn from ``keyed_rng(seed, key)``: a
generator per query, so a query's candidates do not change when other queries are added or dropped.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import tarfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rankrl.data.errors import MalformedDataError, MissingDataError
from rankrl.data.records import Benchmark, Document, Qrels, Run

# Errors that mean "the bytes are not in the expected format"; anything else is a bug and propagates.
PARSE_ERRORS = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    EOFError,
    zlib.error,
    gzip.BadGzipFile,
    tarfile.TarError,
    csv.Error,
    UnicodeDecodeError,
)


def require(path: Path, benchmark: str, hint: str = "") -> Path:
    """``path`` if it is a file, else a ``MissingDataError`` telling how to fetch it."""
    if not path.is_file():
        raise MissingDataError(path, benchmark, hint)
    return path


@contextmanager
def parsing(path: Path, where: str = "") -> Iterator[None]:
    """Turn a parse failure inside the block into a ``MalformedDataError`` naming ``path``."""
    try:
        yield
    except MalformedDataError:
        raise
    except PARSE_ERRORS as err:
        kind = "missing field" if isinstance(err, KeyError) else type(err).__name__
        raise MalformedDataError(path, f"{where + ': ' if where else ''}{kind}: {err}") from err


def open_text(path: Path, encoding: str = "utf-8"):
    """Open a text file, transparently un-gzipping ``*.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding=encoding)
    return open(path, encoding=encoding, newline="")


def read_json(path: Path) -> Any:
    """Parse a whole JSON file (gz allowed)."""
    with parsing(path), open_text(path) as f:
        return json.load(f)


def iter_jsonl(path: Path) -> Iterator[dict]:
    """Yield the objects of a JSON-lines file (gz allowed), skipping blank lines."""
    with open_text(path) as f:
        for lineno, line in enumerate(_lines(f, path), 1):
            if not line.strip():
                continue
            with parsing(path, f"line {lineno}"):
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise TypeError(f"expected a JSON object, got {type(row).__name__}")
            yield row


def _lines(f, path: Path) -> Iterator[str]:
    """Lines of an open file, with decoding and gzip errors attributed to ``path``."""
    with parsing(path):
        yield from f


def read_rows(
    path: Path, min_cols: int, sep: str = "\t", header: bool = False, encoding: str = "utf-8"
) -> list[list[str]]:
    """Split a delimited text file into rows of at least ``min_cols`` fields.

    Plain splitting, no quote handling: TREC and MS MARCO files are not CSV-quoted, and a query
    that contains a ``"`` must not swallow the next line.
    """
    rows: list[list[str]] = []
    with open_text(path, encoding) as f:
        for lineno, line in enumerate(_lines(f, path), 1):
            line = line.rstrip("\r\n")
            if not line.strip() or (header and lineno == 1):
                continue
            fields = line.split(sep) if sep else line.split()
            if len(fields) < min_cols:
                raise MalformedDataError(
                    path, f"line {lineno}: expected {min_cols} fields, got {len(fields)}"
                )
            rows.append(fields)
    return rows


def read_trec_qrels(path: Path) -> Qrels:
    """TREC qrels ``qid iter docid grade`` (spaces or tabs) -> ``{qid: {docid: grade}}``."""
    qrels: Qrels = {}
    rows = read_rows(path, 4, sep="")
    with parsing(path, "relevance grade"):
        for qid, _, docid, grade, *_ in rows:
            qrels.setdefault(qid, {})[docid] = int(grade)
    return qrels


def read_trec_run(path: Path) -> Run:
    """TREC run ``qid Q0 docid rank score tag`` -> ``{qid: {docid: score}}``."""
    run: Run = {}
    rows = read_rows(path, 5, sep="")
    with parsing(path, "score"):
        for qid, _, docid, _, score, *_ in rows:
            run.setdefault(qid, {})[docid] = float(score)
    return run


def keyed_rng(seed: int, key: str) -> random.Random:
    """A generator that depends only on ``seed`` and ``key`` (string seeding is stable across runs)."""
    return random.Random(f"{seed}:{key}")


def split_ids(ids: Sequence[str], fractions: Mapping[str, float], seed: int) -> dict[str, list[str]]:
    """Assign ids to named splits by a seeded shuffle; each split keeps the ids' original order.

    Split sizes are ``round(fraction * n)``; the last split takes the remainder, so nothing is lost.
    """
    if not fractions or any(f < 0 for f in fractions.values()) or sum(fractions.values()) > 1 + 1e-9:
        raise ValueError(f"split fractions must be >= 0 and sum to at most 1, got {dict(fractions)}")
    order = list(ids)
    random.Random(seed).shuffle(order)
    names = list(fractions)
    member: dict[str, str] = {}
    start = 0
    for i, name in enumerate(names):
        stop = len(order) if i == len(names) - 1 else start + round(fractions[name] * len(order))
        member.update((x, name) for x in order[start:stop])
        start = stop
    return {name: [x for x in ids if member.get(x) == name] for name in names}


def sample_negatives(rng: random.Random, pool: Sequence[str], exclude: set[str], k: int) -> list[str]:
    """``k`` distinct items of ``pool`` outside ``exclude``, drawn with ``rng``.

    Rejection sampling: pools here are thousands of items and ``exclude`` a few dozen, so this
    is much cheaper than building the complement for every query.
    """
    if len(pool) < 4 * (k + len(exclude)) and len(set(pool) - exclude) < k:
        raise ValueError(
            f"cannot sample {k} negatives from {len(pool)} items of which {len(exclude)} are excluded"
        )
    chosen: list[str] = []
    seen = set(exclude)
    while len(chosen) < k:
        item = pool[rng.randrange(len(pool))]
        if item not in seen:
            seen.add(item)
            chosen.append(item)
    return chosen


def split_corpus(benchmark: Benchmark, split: str) -> dict[str, Document]:
    """The documents a split retrieves from.

    Image benchmarks (COCO-CN, CIRR, Flickr30k-CN ...) evaluate each split against its own image
    gallery and tag every document with ``extra['split']``; other benchmarks share one corpus.
    """
    corpus = benchmark.corpus
    if not any("split" in doc.extra for doc in corpus.values()):
        return corpus
    return {docid: doc for docid, doc in corpus.items() if doc.extra.get("split") == split}


class UnavailableCorpus(dict):
    """An empty corpus that explains itself when used.

    BRIGHT ships its topics without documents; a loader returns this instead of ``{}`` so a
    retriever that iterates the corpus fails with the file to fetch, not with zero results.
    ``len()`` is 0 and ``bool()`` is False, so code may check for it without triggering the error.
    """

    def __init__(self, error: MissingDataError) -> None:
        super().__init__()
        self.error = error

    def _fail(self, *args: Any, **kwargs: Any):
        raise self.error

    def __reduce__(self):
        # dict's own pickling would iterate the items, i.e. raise; keep the error instead.
        return type(self), (self.error,)

    __iter__ = __getitem__ = __contains__ = keys = values = items = get = _fail

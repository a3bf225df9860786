"""Sequential recommendation for F-GRPO: MovieLens-100K and HetRec 2011 Last.fm.

A query is one user's history; its target is the next item; ``extra['candidates']`` holds the
target and ``num_candidates - 1`` negatives (items the user never interacted with, sampled per
query with a seeded generator), shuffled. Items are documents: the title plus genres (MovieLens)
or the artist name plus its most used tags (Last.fm).

Splits are leave-one-out per user, the usual protocol for sequential recommendation: ``test``
predicts the last item from everything before it, ``dev`` the second to last, ``train`` the third
to last; so every user appears once in each split (query ids ``<user>-<split>``). Histories are
cut to the most recent ``max_history`` items.

``runs['popularity']`` scores each query's candidates by how many users interacted with the item in the
training data (every user's sequence without its dev and test items): the classic most-popular baseline,
with no model, on the same pools.

Ordering (``extra['order']`` of every query says which):
- MovieLens (``time``): chronological by rating timestamp (ties broken by item id).
- Last.fm has no listening timestamps: ``user_artists.dat`` holds each user's total play count per artist.
  - ``order="plays"`` (the CPU rows; the only order the shared copy allows): a user's artists by play
    count, ascending (ties by artist id): the held-out "next" item is the user's most played artist,
    predicted from artists they play less. Users with fewer than four artists are skipped (10 of 1,892).
  - ``order="tags"`` (profile=paper): a user's artists in the order they first tagged them
    (``user_taggedartists-timestamps.dat`` of the GroupLens release: one row per tag assignment with its
    time; ties by artist id). It is the only sequence in time that HetRec 2011 has (the F-GRPO paper does
    not say how its Last.fm sequences were made), but it orders *tagging*, not listening: only the
    artists a user tagged (a subset of what they played), at the day granularity of the HetRec dates
    (readme.txt's example: 1238536800000 ms = 1 April 2009, 00:00 CEST, the day of user_taggedartists.dat).
    Artists absent from ``artists.dat`` are dropped (no name to show).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from rankrl.data.common import keyed_rng, parsing, read_rows, require, sample_negatives
from rankrl.data.errors import MalformedDataError
from rankrl.data.records import Benchmark, Document, Query

MOVIELENS_DIR = "movielens-100k"
LASTFM_DIR = "lastfm-hetrec2011"
# The 19 genre flags at the end of each u.item line (GroupLens u.genre order).
MOVIELENS_GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)


def load_movielens(
    data_dir: Path, max_history: int = 20, num_candidates: int = 20, seed: int = 0
) -> Benchmark:
    """MovieLens-100K from ``movielens-100k/u.data`` and ``u.item``.

    Accepts the GroupLens release (``u.data`` tab-separated, ``u.item`` ``|``-separated and
    Latin-1, no header) and the shared copy (all ``|``-separated with a header line).
    """
    name = "movielens-100k"
    folder = Path(data_dir) / MOVIELENS_DIR
    ratings_path = require(folder / "u.data", name)
    items_path = require(folder / "u.item", name)
    items: dict[str, Document] = {}
    with parsing(items_path, "movie"):
        for row in _read_flexible(items_path, 5 + len(MOVIELENS_GENRES)):
            title = row[1].strip()
            genres = [
                g for g, flag in zip(MOVIELENS_GENRES, row[-len(MOVIELENS_GENRES) :]) if flag.strip() == "1"
            ]
            items[row[0]] = Document(
                row[0], f"{title} (genres: {', '.join(genres)})", title, {"genres": genres}
            )
    events: dict[str, list[tuple[int, int]]] = {}
    with parsing(ratings_path, "rating"):
        for user, item, _, timestamp, *_ in _read_flexible(ratings_path, 4):
            events.setdefault(user, []).append((int(timestamp), int(item)))
    sequences = {user: [str(item) for _, item in sorted(ev)] for user, ev in events.items()}
    return _leave_one_out(name, ratings_path, sequences, items, max_history, num_candidates, seed, "time")


LASTFM_ORDERS = ("plays", "tags")
LASTFM_TAG_TIMES = "user_taggedartists-timestamps.dat"


def load_lastfm(
    data_dir: Path,
    max_history: int = 20,
    num_candidates: int = 20,
    num_tags: int = 5,
    seed: int = 0,
    order: str = "plays",
) -> Benchmark:
    """HetRec 2011 Last.fm from ``lastfm-hetrec2011/`` (``artists.dat``; ``user_artists.dat`` or
    ``user_taggedartists-timestamps.dat`` by ``order``, see the module docstring).

    Artist tags come from ``user_taggedartists.dat`` + ``tags.dat`` when present (the GroupLens
    zip has them; the shared copy lacks the tag assignments, so documents are names only there).
    """
    name = "lastfm"
    if order not in LASTFM_ORDERS:
        raise ValueError(f"Last.fm order={order!r}; valid: {', '.join(LASTFM_ORDERS)}")
    folder = Path(data_dir) / LASTFM_DIR
    artists_path = require(folder / "artists.dat", name)
    top_tags = _lastfm_top_tags(folder, num_tags)
    items: dict[str, Document] = {}
    for artist_id, artist, *_ in _read_any_encoding(artists_path, 2, "\t", header=True):
        tags = top_tags.get(artist_id, [])
        text = f"{artist} (tags: {', '.join(tags)})" if tags else artist
        items[artist_id] = Document(artist_id, text, artist, {"tags": tags})
    if order == "tags":
        # the tag-time file is in the GroupLens zip only (source lastfm-tags), not in the shared copy
        source = require(folder / LASTFM_TAG_TIMES, "lastfm-tags")
        sequences = _lastfm_tag_sequences(source, items)
    else:
        source = require(folder / "user_artists.dat", name)
        plays: dict[str, list[tuple[int, int]]] = {}
        with parsing(source, "play count"):
            for user, artist_id, weight, *_ in read_rows(source, 3, header=True):
                plays.setdefault(user, []).append((int(weight), int(artist_id)))
        sequences = {user: [str(a) for _, a in sorted(p)] for user, p in plays.items()}
    return _leave_one_out(name, source, sequences, items, max_history, num_candidates, seed, order)


def _lastfm_tag_sequences(path: Path, items: Mapping[str, Document]) -> dict[str, list[str]]:
    """user -> the artists they tagged, in the order of each artist's first tag assignment (ties by artist
    id); artists without an ``artists.dat`` entry are left out."""
    first: dict[str, dict[int, int]] = {}
    with parsing(path, "tag assignment"):
        for user, artist_id, _, timestamp, *_ in read_rows(path, 4, header=True):
            if artist_id not in items:
                continue
            seen = first.setdefault(user, {})
            artist, time = int(artist_id), int(timestamp)
            seen[artist] = min(time, seen.get(artist, time))
    return {
        user: [str(a) for a, _ in sorted(times.items(), key=lambda kv: (kv[1], kv[0]))]
        for user, times in first.items()
    }


def _lastfm_top_tags(folder: Path, num_tags: int) -> dict[str, list[str]]:
    """artist id -> its ``num_tags`` most assigned tags (ties by name); empty without the tag files."""
    assignments, tag_file = folder / "user_taggedartists.dat", folder / "tags.dat"
    if not (assignments.is_file() and tag_file.is_file()):
        return {}
    tag_names = {tag_id: tag for tag_id, tag, *_ in _read_any_encoding(tag_file, 2, "\t", header=True)}
    counts: dict[str, Counter] = {}
    for _, artist_id, tag_id, *_ in read_rows(assignments, 3, header=True):
        counts.setdefault(artist_id, Counter())[tag_names.get(tag_id, tag_id)] += 1
    return {
        a: [t for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:num_tags]]
        for a, c in counts.items()
    }


def _leave_one_out(
    name: str,
    source: Path,
    sequences: dict[str, list[str]],
    items: dict[str, Document],
    max_history: int,
    num_candidates: int,
    seed: int,
    order: str,
) -> Benchmark:
    """One train/dev/test query per user from its ordered item sequence (see the module docstring);
    ``order`` names the ordering, kept in every query's ``extra['order']``."""
    unknown = {i for seq in sequences.values() for i in seq} - items.keys()
    if unknown:
        raise MalformedDataError(
            source, f"{len(unknown)} item ids have no item entry, e.g. {sorted(unknown)[:3]}"
        )
    pool = sorted(items, key=lambda i: (len(i), i))
    # training-time popularity: a user's last two items are its dev and test targets, never counted
    popularity = Counter(i for seq in sequences.values() for i in set(seq[:-2]))
    queries: dict[str, Query] = {}
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for user in sorted(sequences, key=lambda u: (len(u), u)):
        seq = sequences[user]
        if len(seq) < 4:
            continue
        for split, cut in (("train", len(seq) - 3), ("dev", len(seq) - 2), ("test", len(seq) - 1)):
            qid = f"{user}-{split}"
            rng = keyed_rng(seed, qid)
            history = seq[max(0, cut - max_history) : cut]
            candidates = [seq[cut], *sample_negatives(rng, pool, set(seq), num_candidates - 1)]
            rng.shuffle(candidates)
            text = "\n".join(items[i].title for i in history)
            extra = {"user": user, "history": history, "candidates": candidates, "order": order}
            queries[qid] = Query(qid, text, extra)
            qrels[qid] = {seq[cut]: 1}
            splits[split].append(qid)
            run[qid] = {c: float(popularity[c]) for c in candidates}
    return Benchmark(name, queries, dict(items), qrels, splits, runs={"popularity": run})


def _read_any_encoding(path: Path, min_cols: int, sep: str, header: bool) -> list[list[str]]:
    """Rows of a file that is UTF-8 in some copies and Latin-1 in others (GroupLens files)."""
    try:
        return read_rows(path, min_cols, sep=sep, header=header)
    except MalformedDataError as err:
        if not isinstance(err.__cause__, UnicodeDecodeError):
            raise
        return read_rows(path, min_cols, sep=sep, header=header, encoding="latin-1")


def _read_flexible(path: Path, min_cols: int) -> list[list[str]]:
    """Rows of a MovieLens file in either the GroupLens (tab or ``|``, no header) or the shared layout."""
    with open(path, "rb") as f:
        first = f.readline().decode("latin-1")
    sep = "\t" if "\t" in first else "|"
    return _read_any_encoding(path, min_cols, sep, header=not first.split(sep)[0].strip().isdigit())

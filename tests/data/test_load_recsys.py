"""MovieLens-100K and Last.fm sequential recommendation (real subsets, and the GroupLens layouts)."""

from __future__ import annotations

import shutil
from collections import defaultdict

import pytest

from rankrl.data import load_benchmark

from .conftest import write_text


def _ratings(data_dir):
    rows = [line.split("|") for line in (data_dir / "movielens-100k" / "u.data").read_text().splitlines()[1:]]
    by_user = defaultdict(list)
    for user, item, _, ts in rows:
        by_user[user].append((int(ts), int(item)))
    return by_user


@pytest.fixture(scope="module")
def movielens(data_dir):
    return load_benchmark("movielens-100k", data_dir)


def test_movielens_leave_one_out_in_time_order(data_dir, movielens):
    bench = movielens
    assert len(bench.corpus) == 1682
    assert {name: len(q) for name, q in bench.splits.items()} == {"train": 943, "dev": 943, "test": 943}
    by_user = _ratings(data_dir)
    for qid in bench.splits["test"][:200]:
        query = bench.queries[qid]
        events = sorted(by_user[query.extra["user"]])
        seen = {str(i) for _, i in events}
        target = next(iter(bench.qrels[qid]))
        assert target == str(events[-1][1])  # the last rating in time
        assert query.extra["history"] == [str(i) for _, i in events[-21:-1]]
        candidates = query.extra["candidates"]
        assert len(candidates) == len(set(candidates)) == 20 and target in candidates
        assert not (set(candidates) - {target}) & seen  # negatives are items the user never rated
        assert query.text.splitlines() == [bench.corpus[i].title for i in query.extra["history"]]
    toy_story = bench.corpus["1"]
    assert toy_story.title == "Toy Story (1995)"
    assert toy_story.extra["genres"] == ["Animation", "Children's", "Comedy"]
    assert "Comedy" in toy_story.text


def test_movielens_dev_and_train_step_back_one_item(data_dir):
    bench = load_benchmark("movielens-100k", data_dir, max_history=5)
    test, dev, train = (bench.queries[f"1-{s}"] for s in ("test", "dev", "train"))
    assert dev.extra["history"] == train.extra["history"][1:] + [next(iter(bench.qrels["1-train"]))]
    assert test.extra["history"] == dev.extra["history"][1:] + [next(iter(bench.qrels["1-dev"]))]
    assert len(test.extra["history"]) == 5


def test_movielens_grouplens_layout_gives_the_same_benchmark(tmp_path, data_dir, movielens):
    """The GroupLens release: tab-separated u.data, Latin-1 u.item, no header lines."""
    src = data_dir / "movielens-100k"
    data = [line.split("|") for line in (src / "u.data").read_text().splitlines()[1:]]
    write_text(tmp_path / "movielens-100k" / "u.data", "".join("\t".join(r) + "\n" for r in data))
    # The rat-nick/recsys copy `make data` fetches went through a lossy re-encoding (U+FFFD) that
    # Latin-1 cannot hold.
    items = (src / "u.item").read_text().replace("\ufffd", "?").splitlines()[1:]
    items[0] = items[0].replace("Toy Story", "Toy Störy")
    write_text(tmp_path / "movielens-100k" / "u.item", "\n".join(items) + "\n", encoding="latin-1")
    ours, shared = load_benchmark("movielens-100k", tmp_path), movielens
    assert ours.corpus["1"].title == "Toy Störy (1995)"
    assert ours.splits == shared.splits and ours.qrels == shared.qrels
    assert [q.extra for q in ours.queries.values()] == [q.extra for q in shared.queries.values()]


def test_lastfm_orders_by_play_count(data_dir):
    bench = load_benchmark("lastfm", data_dir)
    assert len(bench.corpus) == 17632
    assert {name: len(q) for name, q in bench.splits.items()} == {"train": 1882, "dev": 1882, "test": 1882}
    plays = defaultdict(dict)
    for line in (data_dir / "lastfm-hetrec2011" / "user_artists.dat").read_text().splitlines()[1:]:
        user, artist, weight = line.split("\t")
        plays[user][artist] = int(weight)
    for qid in bench.splits["test"][:200]:
        query = bench.queries[qid]
        user_plays = plays[query.extra["user"]]
        target = next(iter(bench.qrels[qid]))
        assert user_plays[target] == max(user_plays.values())
        counts = [user_plays[a] for a in query.extra["history"]]
        assert counts == sorted(counts) and counts[-1] <= user_plays[target]
        assert len(query.extra["candidates"]) == 20
        assert not (set(query.extra["candidates"]) - {target}) & user_plays.keys()
    assert bench.corpus["1"].title == "MALICE MIZER" and bench.corpus["1"].extra["tags"] == []


def test_lastfm_uses_tag_assignments_when_present(tmp_path):
    folder = tmp_path / "lastfm-hetrec2011"
    write_text(
        folder / "artists.dat",
        "id\tname\turl\tpictureURL\n"
        + "".join(f"{i}\tArtist {i}\thttp://x/{i}\thttp://y/{i}\n" for i in range(1, 41)),
    )
    write_text(
        folder / "user_artists.dat",
        "userID\tartistID\tweight\r\n"
        + "".join(f"{u}\t{a}\t{a * 10}\r\n" for u in (2, 3) for a in range(u, u + 6)),
    )
    write_text(folder / "tags.dat", "tagID\ttagValue\n1\trock\n2\tpop\n3\tjazz\n", encoding="latin-1")
    write_text(
        folder / "user_taggedartists.dat",
        "userID\tartistID\ttagID\tday\tmonth\tyear\n"
        + "2\t5\t1\t1\t4\t2009\n3\t5\t1\t1\t4\t2009\n2\t5\t3\t1\t4\t2009\n2\t6\t2\t1\t4\t2009\n",
    )
    bench = load_benchmark("lastfm", tmp_path, num_tags=2)
    assert bench.corpus["5"].extra["tags"] == ["rock", "jazz"]
    assert bench.corpus["5"].text == "Artist 5 (tags: rock, jazz)"
    assert bench.queries["2-test"].extra["history"] == ["2", "3", "4", "5", "6"]
    assert bench.qrels["2-test"] == {"7": 1}


def test_too_few_items_for_negatives_is_an_error(tmp_path):
    folder = tmp_path / "lastfm-hetrec2011"
    write_text(
        folder / "artists.dat",
        "id\tname\turl\tpictureURL\n" + "".join(f"{i}\tA{i}\tu\tp\n" for i in range(1, 9)),
    )
    write_text(
        folder / "user_artists.dat",
        "userID\tartistID\tweight\n" + "".join(f"2\t{a}\t{a}\n" for a in range(1, 6)),
    )
    with pytest.raises(ValueError, match="negatives"):
        load_benchmark("lastfm", tmp_path)


def test_popularity_run_counts_training_interactions_only(data_dir, movielens):
    """runs['popularity']: per query, each candidate's number of users who rated it outside their own dev
    and test items (the most-popular baseline may not see any held-out target)."""
    by_user = _ratings(data_dir)
    training = defaultdict(int)
    for events in by_user.values():
        for _, item in sorted(events)[:-2]:
            training[str(item)] += 1
    run = movielens.runs["popularity"]
    assert set(run) == set(movielens.queries)
    for qid in movielens.splits["test"][:100] + movielens.splits["dev"][:100]:
        candidates = movielens.queries[qid].extra["candidates"]
        assert run[qid] == {c: float(training[c]) for c in candidates}


def test_lastfm_tag_order_follows_each_artists_first_tag_time(tmp_path, data_dir):
    """profile=paper's Last.fm: user_taggedartists-timestamps.dat in the GroupLens layout (the readme's
    header and millisecond times), the real artists.dat. A user's artists come in the order of their first
    tag (ties by artist id), artists without a name are dropped, users with fewer than 4 are skipped."""
    folder = tmp_path / "lastfm-hetrec2011"
    folder.mkdir()
    shutil.copyfile(data_dir / "lastfm-hetrec2011" / "artists.dat", folder / "artists.dat")
    day = 86_400_000
    rows = [
        # user 2: artist 52 tagged on days 5 and 1 (first: day 1), 51 on day 2, 60 and 55 both on day 3
        (2, 52, 13, 5 * day), (2, 52, 14, 1 * day), (2, 51, 13, 2 * day), (2, 60, 7, 3 * day),
        (2, 55, 7, 3 * day), (2, 99999, 7, 0), (2, 70, 1, 9 * day),
        (3, 51, 1, day), (3, 52, 1, 2 * day), (3, 53, 1, 3 * day),  # 3 artists: skipped
    ]  # fmt: skip
    lines = "".join(f"{u}\t{a}\t{t}\t{ms}\r\n" for u, a, t, ms in rows)
    write_text(folder / "user_taggedartists-timestamps.dat", "userID\tartistID\ttagID\ttimestamp\r\n" + lines)
    bench = load_benchmark("lastfm", tmp_path, order="tags")
    assert {name: len(q) for name, q in bench.splits.items()} == {"train": 1, "dev": 1, "test": 1}
    test = bench.queries["2-test"]
    assert test.extra["history"] == ["52", "51", "55", "60"] and bench.qrels["2-test"] == {"70": 1}
    assert bench.qrels["2-dev"] == {"60": 1} and bench.qrels["2-train"] == {"55": 1}
    assert test.extra["order"] == "tags" and "99999" not in test.extra["candidates"]
    assert bench.queries["2-test"].text.splitlines()[0] == bench.corpus["52"].title
    # the play-count order is still the default, and the file names its fetch command when missing
    assert load_benchmark("lastfm", data_dir).queries["2-test"].extra["order"] == "plays"
    from rankrl.data import MissingDataError

    (folder / "user_taggedartists-timestamps.dat").unlink()
    with pytest.raises(MissingDataError, match="--only lastfm-tags"):
        load_benchmark("lastfm", tmp_path, order="tags")
    with pytest.raises(ValueError, match="plays, tags"):
        load_benchmark("lastfm", data_dir, order="listens")

"""Ranking metrics (trec_eval semantics through ir_measures/pytrec_eval) and set precision/recall/F1."""

from __future__ import annotations

import math
from pathlib import Path

import ir_measures
import pytest

from rankrl.eval.metrics import evaluate_run, mean_set_prf, parse_measures, per_query, set_prf


def _read_trec(data_dir: Path, year: str) -> tuple[dict, dict]:
    folder = data_dir / "trec_dl"
    run: dict[str, dict[str, float]] = {}
    for doc in ir_measures.read_trec_run(str(folder / f"bm25_trec_results_dl{year}.txt")):
        run.setdefault(doc.query_id, {})[doc.doc_id] = doc.score
    qrels: dict[str, dict[str, int]] = {}
    for qrel in ir_measures.read_trec_qrels(str(folder / f"qrels.dl{year}-passage.txt")):
        qrels.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
    return run, qrels


@pytest.mark.parametrize("year,ndcg10,n_queries", [("19", 0.5058, 43), ("20", 0.4796, 54)])
def test_bm25_trec_dl_ndcg10_matches_published(
    data_dir: Path, year: str, ndcg10: float, n_queries: int
) -> None:
    # The BM25 rows Rank-R1 and RankGPT publish: trec_eval -c -m ndcg_cut.10.
    run, qrels = _read_trec(data_dir, year)
    metrics = evaluate_run(run, qrels, ["nDCG@10", "R@100", "RR@10"], relevance_level=2)
    assert round(metrics["nDCG@10"], 4) == ndcg10
    assert len(per_query(run, qrels, ["nDCG@10"], relevance_level=2)) == n_queries
    # RR@k is recip_rank on the run cut to depth k; MS MARCO's own MRR@10 code must agree.
    msmarco = ir_measures.msmarco.calc_aggregate([ir_measures.RR(rel=2) @ 10], qrels, run)
    assert metrics["RR@10"] == pytest.approx(next(iter(msmarco.values())), abs=1e-12)
    assert 0 < metrics["RR@10"] <= evaluate_run(run, qrels, ["RR"], relevance_level=2)["RR"]


def test_bm25_dl19_missing_queries_count_as_zero(data_dir: Path) -> None:
    run, qrels = _read_trec(data_dir, "19")
    full = evaluate_run(run, qrels, ["nDCG@10"], relevance_level=2)["nDCG@10"]
    dropped = sorted(run)[:10]
    partial = {qid: docs for qid, docs in run.items() if qid not in dropped}
    expected = full - sum(per_query(run, qrels, ["nDCG@10"]).loc[dropped, "nDCG@10"]) / len(qrels)
    assert evaluate_run(partial, qrels, ["nDCG@10"], relevance_level=2)["nDCG@10"] == pytest.approx(expected)


# One query, four documents with grades 3, 1, 2, 0 ranked in that order.
QRELS = {"q1": {"d1": 3, "d2": 1, "d3": 2, "d4": 0}}
RUN = {"q1": {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}}


def test_precision_with_relevance_level_two_by_hand() -> None:
    level1 = evaluate_run(RUN, QRELS, ["P@1", "P@2", "P@3", "P@4"], relevance_level=1)
    level2 = evaluate_run(RUN, QRELS, ["P@1", "P@2", "P@3", "P@4"], relevance_level=2)
    assert level1 == pytest.approx({"P@1": 1.0, "P@2": 1.0, "P@3": 1.0, "P@4": 0.75})
    assert level2 == pytest.approx({"P@1": 1.0, "P@2": 0.5, "P@3": 2 / 3, "P@4": 0.5})
    # An explicit rel in the name wins over relevance_level.
    assert evaluate_run(RUN, QRELS, ["P(rel=3)@2"], relevance_level=1)["P(rel=3)@2"] == pytest.approx(0.5)


def test_ndcg_keeps_graded_gains_by_hand() -> None:
    dcg = 3 / math.log2(2) + 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    for level in (1, 2, 3):
        assert evaluate_run(RUN, QRELS, ["nDCG@3"], relevance_level=level)["nDCG@3"] == pytest.approx(
            dcg / ideal
        )


def test_reciprocal_rank_and_recall_by_hand() -> None:
    qrels = {"q1": {"d3": 2, "d4": 1}}
    got = evaluate_run(RUN, qrels, ["RR@2", "RR@3", "RR", "R@3", "AP"], relevance_level=2)
    assert got == pytest.approx({"RR@2": 0.0, "RR@3": 1 / 3, "RR": 1 / 3, "R@3": 1.0, "AP": 1 / 3})
    got = evaluate_run(RUN, qrels, ["RR@3", "R@3"], relevance_level=1)
    assert got == pytest.approx({"RR@3": 1 / 3, "R@3": 0.5})


def test_complete_query_set_semantics_by_hand() -> None:
    # trec_eval -c: q2 is judged but unanswered, so it counts as 0; q9 is answered but unjudged, so ignored.
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}}
    run = {"q1": {"a": 2.0, "b": 1.0}, "q9": {"c": 5.0}}
    assert evaluate_run(run, qrels, ["P@1", "nDCG@10"]) == pytest.approx({"P@1": 0.5, "nDCG@10": 0.5})
    table = per_query(run, qrels, ["P@1", "nDCG@10"])
    assert list(table.index) == ["q1", "q2"] and list(table.columns) == ["P@1", "nDCG@10"]
    assert table.loc["q2"].tolist() == [0.0, 0.0] and table.loc["q1"].tolist() == [1.0, 1.0]
    assert evaluate_run({}, qrels, ["P@1"]) == {"P@1": 0.0}


def test_ties_broken_as_trec_eval() -> None:
    # Equal scores: trec_eval ranks the larger docid first, so "b" comes before "a".
    run = {"q": {"a": 1.0, "b": 1.0}}
    qrels = {"q": {"a": 1}}
    assert evaluate_run(run, qrels, ["P@1", "RR", "RR@1"]) == pytest.approx(
        {"P@1": 0.0, "RR": 0.5, "RR@1": 0.0}
    )


def test_results_keyed_by_given_names() -> None:
    got = evaluate_run(RUN, QRELS, ["MAP", "AP", "nDCG@10"], relevance_level=2)
    assert list(got) == ["MAP", "AP", "nDCG@10"] and got["MAP"] == got["AP"]
    assert str(parse_measures(["R@100"], relevance_level=2)["R@100"]) == "R(rel=2)@100"


@pytest.mark.parametrize(
    "measures,error,match",
    [
        (["nDGC@10"], ValueError, "unknown or malformed measure 'nDGC@10'.*nDCG@10"),
        (["Judged@10"], ValueError, "not computed by pytrec_eval"),
        ("nDCG@10", TypeError, "list of names"),
        ([], ValueError, "no measures"),
    ],
)
def test_bad_measures_give_clear_errors(measures, error, match) -> None:
    with pytest.raises(error, match=match):
        evaluate_run(RUN, QRELS, measures)


def test_bad_run_or_qrels() -> None:
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate_run(RUN, {}, ["P@1"])
    with pytest.raises(TypeError, match="qid -> {docid: score}"):
        evaluate_run({"q1": ["d1", "d2"]}, QRELS, ["P@1"])


@pytest.mark.parametrize(
    "predicted,relevant,expected",
    [
        (["a", "b", "c", "d"], ["a", "b", "e"], (0.5, 2 / 3, 4 / 7)),
        (["a", "a", "b"], ["a"], (0.5, 1.0, 2 / 3)),  # duplicates count once
        ({"a"}, ("a",), (1.0, 1.0, 1.0)),
        ([], [], (1.0, 1.0, 1.0)),  # nothing to find and nothing claimed: exactly right
        ([], ["a"], (0.0, 0.0, 0.0)),  # an empty answer earns nothing
        (["a"], [], (0.0, 0.0, 0.0)),
        (["x"], ["a"], (0.0, 0.0, 0.0)),
    ],
)
def test_set_prf(predicted, relevant, expected) -> None:
    assert set_prf(predicted, relevant) == pytest.approx(expected)


def test_set_prf_f1_is_one_only_for_equal_sets() -> None:
    items = ["a", "b", "c"]
    subsets = [[x for i, x in enumerate(items) if mask >> i & 1] for mask in range(8)]
    for pred in subsets:
        for rel in subsets:
            assert (set_prf(pred, rel)[2] == 1.0) == (set(pred) == set(rel))


def test_set_prf_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError, match="not a single string"):
        set_prf("abc", ["abc"])


def test_mean_set_prf_macro_average() -> None:
    relevant = {"q1": ["a", "b"], "q2": ["c"], "q3": ["d"]}
    predicted = {"q1": ["a"], "q2": ["c", "x"], "q_unjudged": ["z"]}  # q3 missing -> empty prediction
    p, r, f = mean_set_prf(predicted, relevant)
    assert p == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert r == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert f == pytest.approx((2 / 3 + 2 / 3 + 0.0) / 3)
    with pytest.raises(ValueError, match="relevant is empty"):
        mean_set_prf(predicted, {})


def test_per_query_tables_hold_what_the_means_average():
    from rankrl.eval.metrics import scored_run, set_prf_table

    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"c": 1.0}}
    qrels = {"q1": {"a": 1}, "q2": {"d": 1}, "q3": {"e": 1}}  # q3 unanswered: 0, as trec_eval -c
    means, table = scored_run(run, qrels, ["RR@10", "R@2"])
    assert table.index.tolist() == ["q1", "q2", "q3"] and table["RR@10"].tolist() == [1.0, 0.0, 0.0]
    assert means == evaluate_run(run, qrels, ["RR@10", "R@2"]) == {"RR@10": 1 / 3, "R@2": 1 / 3}
    predicted = {"q1": {"a", "b"}, "q2": set()}
    relevant = {"q1": {"a"}, "q2": {"d"}}
    prf = set_prf_table(predicted, relevant)
    assert prf.loc["q1"].tolist() == list(set_prf({"a", "b"}, {"a"})) and prf.loc["q2", "f1"] == 0.0
    assert tuple(prf.mean()) == pytest.approx(mean_set_prf(predicted, relevant))

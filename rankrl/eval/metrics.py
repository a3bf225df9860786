"""Ranking metrics with trec_eval semantics, and set precision/recall/F1.

Ranked measures go through ir_measures with its pytrec_eval backend (the trec_eval C code), so numbers
match ``trec_eval -c -m <measure>``:

- every query in the qrels counts; a query the run does not answer scores 0 (trec_eval ``-c``).
  Queries the run answers but the qrels do not judge are ignored.
- ``relevance_level`` is the minimum grade a binary measure (P, R, RR, AP, ...) counts as relevant;
  TREC DL uses 2. nDCG keeps the graded gains. A name that sets ``rel`` itself (``P(rel=3)@5``) keeps it.
- measure names are ir_measures' syntax: ``nDCG@10``, ``R@100``, ``RR@10``, ``P@5``, ``AP``. trec_eval
  has no cutoff for reciprocal rank, so ``RR@k`` is trec_eval's ``recip_rank`` on the run cut to its
  top k (in trec_eval's tie order), as ``trec_eval -M k`` would compute it.

Results are keyed by the names the caller passed, so ``"P@5"`` stays ``"P@5"`` whatever the level.

Set metrics (a retrieved set's F1, a slate's coverage of the relevant items) are plain Python over sets.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import ir_measures
import pandas as pd
from ir_measures.measures.base import Measure

from rankrl.data.records import Qrels, Run

PRF_COLUMNS = ("precision", "recall", "f1")  # set_prf's values, as columns of set_prf_table


def parse_measures(measures: Sequence[str], relevance_level: int = 1) -> dict[str, Measure]:
    """Parse ir_measures names and apply ``relevance_level`` to the binary ones.

    Args:
        measures: names such as ``"nDCG@10"``, ``"R@100"``, ``"RR@10"``, ``"P@5"``, ``"AP"``.
        relevance_level: minimum grade counted as relevant by measures that take ``rel``.

    Returns:
        name -> ir_measures Measure, in the given order.
    """
    if isinstance(measures, str):
        raise TypeError(f"measures must be a list of names, e.g. [{measures!r}], not a string")
    if not measures:
        raise ValueError("no measures given; e.g. ['nDCG@10', 'R@100']")
    supported = sorted(m.NAME for m in ir_measures.pytrec_eval.SUPPORTED_MEASURES)
    parsed: dict[str, Measure] = {}
    for name in measures:
        try:
            measure = ir_measures.parse_measure(name)
        except (NameError, ValueError) as err:
            raise ValueError(
                f"unknown or malformed measure {name!r} ({err}); use ir_measures names such as "
                f"'nDCG@10', 'R@100', 'RR@10', 'P@5', 'AP'; pytrec_eval measures: {supported}"
            ) from None
        if "rel" in measure.SUPPORTED_PARAMS and "rel" not in measure.params:
            measure = measure(rel=relevance_level)
        if not ir_measures.pytrec_eval.supports(_pytrec_form(measure)[0]):
            raise ValueError(f"measure {name!r} is not computed by pytrec_eval; supported: {supported}")
        parsed[name] = measure
    return parsed


def _pytrec_form(measure: Measure) -> tuple[Measure, int | None]:
    """The measure pytrec_eval computes, and the depth to cut the run to first (None: no cut).

    trec_eval has no cutoff for reciprocal rank; RR@k is recip_rank on the run cut to its top k,
    which is what ``trec_eval -M k -m recip_rank`` computes.
    """
    if measure.NAME == "RR" and "cutoff" in measure.params:
        params = {k: v for k, v in measure.params.items() if k != "cutoff"}
        return ir_measures.measures.registry["RR"](**params), int(measure["cutoff"])
    return measure, None


def _truncated(run: Run, depth: int) -> Run:
    """Each query's top ``depth`` documents in trec_eval's order (score, then docid, descending)."""
    return {
        qid: dict(sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)[:depth])
        for qid, docs in run.items()
    }


def _checked_inputs(run: Run, qrels: Qrels) -> None:
    """Fail early on the two mistakes that otherwise give silently wrong numbers."""
    if not qrels:
        raise ValueError("qrels are empty: nothing to evaluate against")
    bad = [qid for qid, docs in run.items() if not isinstance(docs, Mapping)]
    if bad:
        raise TypeError(
            f"run must map qid -> {{docid: score}}; query {bad[0]!r} maps to {type(run[bad[0]]).__name__}"
        )


def per_query(run: Run, qrels: Qrels, measures: Sequence[str], relevance_level: int = 1) -> pd.DataFrame:
    """Per-query values, one row per qrels query (0 where the run has no ranking for it).

    Args:
        run: qid -> docid -> score (higher ranks first; ties broken as trec_eval does).
        qrels: qid -> docid -> graded relevance.
        measures: ir_measures names.
        relevance_level: minimum grade counted as relevant by binary measures.

    Returns:
        DataFrame indexed by ``qid`` (sorted), one float column per name in ``measures``.
    """
    _checked_inputs(run, qrels)
    by_depth: dict[int | None, dict[Measure, list[str]]] = {}  # run depth -> pytrec measure -> names
    for name, measure in parse_measures(measures, relevance_level).items():
        pytrec_measure, depth = _pytrec_form(measure)
        by_depth.setdefault(depth, {}).setdefault(pytrec_measure, []).append(name)
    columns: dict[str, dict[str, float]] = {}
    for depth, names_of in by_depth.items():
        evaluator = ir_measures.pytrec_eval.evaluator(list(names_of), qrels)
        for metric in evaluator.iter_calc(run if depth is None else _truncated(run, depth)):
            for name in names_of[metric.measure]:  # "AP" and "MAP" parse to one measure
                columns.setdefault(name, {})[metric.query_id] = float(metric.value)
    table = pd.DataFrame(columns)
    table.index.name = "qid"
    return table.loc[sorted(table.index), list(measures)]


def evaluate_run(
    run: Run, qrels: Qrels, measures: Sequence[str], relevance_level: int = 1
) -> dict[str, float]:
    """Mean of each measure over all qrels queries (trec_eval ``-c``).

    Args:
        run: qid -> docid -> score.
        qrels: qid -> docid -> graded relevance.
        measures: ir_measures names, e.g. ``["nDCG@10", "R@100"]``.
        relevance_level: minimum grade counted as relevant by binary measures (2 on TREC DL).

    Returns:
        name -> mean value, keys in the order of ``measures``.
    """
    return scored_run(run, qrels, measures, relevance_level)[0]


def scored_run(
    run: Run, qrels: Qrels, measures: Sequence[str], relevance_level: int = 1
) -> tuple[dict[str, float], pd.DataFrame]:
    """``evaluate_run``'s means together with the per-query table they average: a run folder keeps the
    table (``per_query.csv``) so that two methods can be compared query by query (a paired test)."""
    table = per_query(run, qrels, measures, relevance_level)
    return {name: float(table[name].mean()) for name in table.columns}, table


def set_prf(predicted: Collection[str], relevant: Collection[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of a predicted set against the relevant set (duplicates ignored).

    Empty sets, where a ratio is 0/0, are defined so that F1 is 1 exactly when the two sets are
    equal, and an empty answer earns nothing while something relevant exists:

    - both empty: (1.0, 1.0, 1.0), the answer is exactly right;
    - nothing predicted, something relevant: (0.0, 0.0, 0.0);
    - something predicted, nothing relevant: (0.0, 0.0, 0.0).

    Returns:
        (precision, recall, f1), each in [0, 1].
    """
    if isinstance(predicted, str) or isinstance(relevant, str):
        raise TypeError("set_prf takes collections of ids, not a single string; wrap it in a list")
    pred, rel = set(predicted), set(relevant)
    return prf_from_counts(len(pred & rel), len(pred), len(rel))


def prf_from_counts(hits: int, num_predicted: int, num_relevant: int) -> tuple[float, float, float]:
    """``set_prf`` from the three counts it depends on: |predicted ∩ relevant|, |predicted|, |relevant|.

    Incremental callers (one item moving in or out of a predicted set) update counts instead of copying
    sets; both paths give bit-identical floats because ``set_prf`` is computed here too.
    """
    if not 0 <= hits <= min(num_predicted, num_relevant):
        raise ValueError(
            f"impossible counts: {hits} hits, {num_predicted} predicted, {num_relevant} relevant"
        )
    if not num_predicted and not num_relevant:
        return 1.0, 1.0, 1.0
    if hits == 0:
        return 0.0, 0.0, 0.0
    precision, recall = hits / num_predicted, hits / num_relevant
    return precision, recall, 2 * precision * recall / (precision + recall)


def mean_set_prf(
    predicted: Mapping[str, Collection[str]], relevant: Mapping[str, Collection[str]]
) -> tuple[float, float, float]:
    """Macro-averaged ``set_prf`` over the queries of ``relevant``.

    As with ``-c`` for rankings, a query missing from ``predicted`` counts as an empty prediction;
    predictions for queries not in ``relevant`` are ignored. F1 is the mean of per-query F1s, not the
    F1 of the mean precision and recall.

    Returns:
        (mean precision, mean recall, mean F1).
    """
    table = set_prf_table(predicted, relevant)
    n = len(table)  # summed in query order, as before the table existed: the same floats to the last bit
    return tuple(sum(table[c].tolist()) / n for c in PRF_COLUMNS)  # type: ignore[return-value]


def set_prf_table(
    predicted: Mapping[str, Collection[str]], relevant: Mapping[str, Collection[str]]
) -> pd.DataFrame:
    """``set_prf`` of every query of ``relevant``: a DataFrame indexed by ``qid`` (in ``relevant``'s order)
    with columns precision, recall, f1; a query missing from ``predicted`` counts as an empty prediction."""
    if not relevant:
        raise ValueError("relevant is empty: no queries to average over")
    rows = {qid: set_prf(predicted.get(qid, ()), rel) for qid, rel in relevant.items()}
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(PRF_COLUMNS))
    table.index.name = "qid"
    return table

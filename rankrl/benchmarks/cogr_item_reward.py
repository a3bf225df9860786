"""CoGR's item reward: the incremental computation against brute force, on a WANDS-sized synthetic catalog.

The item reward of a candidate keyword set S_i is the sum over training queries of F1 with only item i's
keywords replaced, minus the same sum on the reference index (rankrl/tasks/cogr.py). Three ways to compute it:

- ``incremental`` (``ItemCounterfactual.gain``, what training uses): visits only the queries sharing a term
  with the item's old or new bag and updates their (retrieved, relevant retrieved) counts;
- ``brute force`` (``brute_force_gain(rebuild=False)``): patches the item's postings, then retrieves the set
  of *every* query on the counterfactual index and on the reference index and sums the F1 differences;
- ``rebuild`` (``brute_force_gain(rebuild=True)``): the same after building the whole counterfactual index
  from scratch (timed on fewer items: it is the slowest).

Every sampled item's value must be identical (==, not approximately) across the methods measured on it.

The catalog imitates WANDS's shape: 43,000 items and 480 queries; items in ~400 product classes of Zipfian
size; an item has M = 10 keywords (7 from its class's phrase pool, 3 generic ones such as colours or styles,
both Zipf-distributed, about half multi-word) plus its title; a query has N = 15 keywords (13 of its class,
2 generic) plus the query string, and about 200 relevant items of its class (WANDS: ~200 relevant per query).
A candidate set is 10 keywords drawn the same way as the item's own (a plausible rollout). The generic
keywords of queries make retrieved sets large (~10,000 items): the regime of an untrained keyword space;
``--generic-per-query 0`` gives sets of about the relevant size.

CLI: ``python -m rankrl.benchmarks.cogr_item_reward [--items 43000] [--queries 480] [--incremental 2000]
[--brute 30] [--rebuild 3] [--generic-per-query 2] [--seed 0] [--out FILE]``.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankrl.benchmarks import argument_parser
from rankrl.retrieval.keyword_index import KeywordIndex, keyword_bag
from rankrl.tasks.cogr import ItemCounterfactual, brute_force_gain

GOAL_SPEEDUP = 100.0


@dataclass(frozen=True)
class CatalogShape:
    """The synthetic catalog.

    Args:
        items / queries: catalog size.
        classes: product classes (Zipfian sizes).
        class_phrases: keyword phrases per class; generic: phrases shared by every class.
        item_keywords: M (class keywords + generic keywords).
        query_keywords: N (class keywords + generic keywords, e.g. "modern", "grey").
        relevant: relevant items per query (capped at its class's size).
        seed: everything is drawn from it.
    """

    items: int = 43_000
    queries: int = 480
    classes: int = 400
    class_phrases: int = 60
    generic: int = 300
    item_keywords: int = 10
    generic_per_item: int = 3
    query_keywords: int = 15
    generic_per_query: int = 2
    relevant: int = 200
    seed: int = 0


def zipf_choice(rng: random.Random, options: list[str], weights: list[float], k: int) -> list[str]:
    """``k`` distinct options drawn with Zipf weights (rejection of repeats)."""
    chosen: dict[str, None] = {}
    while len(chosen) < min(k, len(options)):
        chosen.update(dict.fromkeys(rng.choices(options, weights, k=k - len(chosen))))
    return list(chosen)[:k]


def phrase(rng: random.Random, stem: str) -> str:
    return f"{stem} {rng.choice(['set', 'chair', 'rug', 'lamp', 'table'])}" if rng.random() < 0.5 else stem


def synthetic_catalog(shape: CatalogShape) -> dict[str, Any]:
    """Items' keywords and titles, query bags and relevant sets, and a candidate keyword sampler."""
    rng = random.Random(shape.seed)
    class_weights = [1 / (r + 1) for r in range(shape.classes)]
    phrase_weights = [1 / (r + 1) for r in range(shape.class_phrases)]
    generic_weights = [1 / (r + 1) for r in range(shape.generic)]
    pools = [[phrase(rng, f"c{c} k{p}") for p in range(shape.class_phrases)] for c in range(shape.classes)]
    generic = [phrase(rng, f"g{g}") for g in range(shape.generic)]
    item_class = rng.choices(range(shape.classes), class_weights, k=shape.items)

    def item_keywords(c: int) -> list[str]:
        n_generic = shape.generic_per_item
        return zipf_choice(rng, pools[c], phrase_weights, shape.item_keywords - n_generic) + zipf_choice(
            rng, generic, generic_weights, n_generic
        )

    items = {f"i{n}": item_keywords(c) for n, c in enumerate(item_class)}
    titles = {f"i{n}": [f"title {n}"] for n in range(shape.items)}
    members: dict[int, list[str]] = {}
    for n, c in enumerate(item_class):
        members.setdefault(c, []).append(f"i{n}")
    query_class = rng.choices(sorted(members), [class_weights[c] for c in sorted(members)], k=shape.queries)
    bags, relevant = {}, {}
    for n, c in enumerate(query_class):
        keywords = zipf_choice(
            rng, pools[c], phrase_weights, shape.query_keywords - shape.generic_per_query
        ) + zipf_choice(rng, generic, generic_weights, shape.generic_per_query)
        bags[f"q{n}"] = keyword_bag([*keywords, f"query {n}"])
        relevant[f"q{n}"] = set(rng.sample(members[c], min(shape.relevant, len(members[c]))))
    return {
        "items": items,
        "titles": titles,
        "bags": bags,
        "relevant": relevant,
        "candidate": lambda item: item_keywords(item_class[int(item[1:])]),
    }


def _per_item(times: list[float]) -> dict[str, float]:
    return {"mean_s": statistics.fmean(times), "median_s": statistics.median(times), "n": len(times)}


def run_benchmark(
    shape: CatalogShape, incremental: int = 2000, brute: int = 30, rebuild: int = 3
) -> dict[str, Any]:
    """Build the catalog, time each method per item, check the values agree exactly."""
    t0 = time.perf_counter()
    data = synthetic_catalog(shape)
    t_catalog = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = KeywordIndex(data["items"], data["titles"])
    counterfactual = ItemCounterfactual(index, data["bags"], data["relevant"])
    t_setup = time.perf_counter() - t0
    rng = random.Random(shape.seed + 1)
    sample = rng.sample(sorted(index.bags), incremental)
    candidates = {i: data["candidate"](i) for i in sample}

    times = {"incremental": [], "brute_force": [], "rebuild": []}
    values: dict[str, dict[str, float]] = {k: {} for k in times}
    for item in sample:
        start = time.perf_counter()
        values["incremental"][item] = counterfactual.gain(item, candidates[item])
        times["incremental"].append(time.perf_counter() - start)
    for item in sample[:brute]:
        start = time.perf_counter()
        values["brute_force"][item] = brute_force_gain(
            index, counterfactual.query_bags, data["relevant"], item, candidates[item], rebuild=False
        )
        times["brute_force"].append(time.perf_counter() - start)
    for item in sample[:rebuild]:
        start = time.perf_counter()
        values["rebuild"][item] = brute_force_gain(
            index, counterfactual.query_bags, data["relevant"], item, candidates[item], rebuild=True
        )
        times["rebuild"].append(time.perf_counter() - start)
    mismatches = [
        (m, i, values[m][i], values["incremental"][i])
        for m in ("brute_force", "rebuild")
        for i in values[m]
        if values[m][i] != values["incremental"][i]
    ]
    affected = [len(counterfactual.affected_queries(i, candidates[i])) for i in sample]
    retrieved = [len(s) for s in counterfactual.reference.values()]
    per_item = {k: _per_item(v) for k, v in times.items() if v}
    speedup = per_item["brute_force"]["mean_s"] / per_item["incremental"]["mean_s"]
    return {
        "shape": asdict(shape),
        "catalog_stats": {
            "mean_retrieved_per_query": statistics.fmean(retrieved),
            "mean_relevant_per_query": statistics.fmean(len(r) for r in data["relevant"].values()),
            "mean_affected_queries_per_item": statistics.fmean(affected),
            "nonzero_gains": sum(v != 0 for v in values["incremental"].values()),
            "reference_total_f1": counterfactual.total_f1(),
        },
        "setup_s": {"catalog": t_catalog, "index_and_reference": t_setup},
        "per_item": per_item,
        "speedup_vs_brute_force": speedup,
        "speedup_vs_rebuild": per_item["rebuild"]["mean_s"] / per_item["incremental"]["mean_s"]
        if "rebuild" in per_item
        else None,
        "identical": not mismatches,
        "mismatches": mismatches[:5],
        "checked_items": {m: len(values[m]) for m in ("brute_force", "rebuild")},
        "goal_speedup": GOAL_SPEEDUP,
        "meets_goal": speedup >= GOAL_SPEEDUP and not mismatches,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def format_report(result: dict[str, Any]) -> str:
    s, p, c = result["shape"], result["per_item"], result["catalog_stats"]
    lines = [
        (
            f"CoGR item reward on a synthetic catalog: {s['items']:,} items x {s['queries']} queries "
            f"(M={s['item_keywords']}, N={s['query_keywords']}, ~{s['relevant']} relevant per query)"
        ),
        (
            f"  retrieved per query (reference): {c['mean_retrieved_per_query']:.0f}; "
            f"queries touched per item: {c['mean_affected_queries_per_item']:.1f}; "
            f"nonzero rewards: {c['nonzero_gains']}/{p['incremental']['n']}"
        ),
        f"  setup (index + reference sets, once per stage): {result['setup_s']['index_and_reference']:.2f} s",
    ]
    for name in ("incremental", "brute_force", "rebuild"):
        if name in p:
            lines.append(
                f"  {name:<12} {p[name]['mean_s'] * 1e3:10.3f} ms/item "
                f"(median {p[name]['median_s'] * 1e3:.3f},"
                f" {p[name]['n']} items)"
            )
    lines.append(
        f"  speed-up vs brute force: {result['speedup_vs_brute_force']:.0f}x"
        + (
            f"; vs rebuilding the index: {result['speedup_vs_rebuild']:.0f}x"
            if result["speedup_vs_rebuild"]
            else ""
        )
    )
    lines.append(
        f"  values identical on every checked item: {result['identical']} "
        f"({result['checked_items']['brute_force']} brute force, "
        f"{result['checked_items']['rebuild']} rebuild)"
    )
    lines.append(
        f"  goal >= {result['goal_speedup']:.0f}x with identical values: "
        f"{'met' if result['meets_goal'] else 'NOT met'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__spec__, __doc__)
    parser.add_argument("--items", type=int, default=CatalogShape.items)
    parser.add_argument("--queries", type=int, default=CatalogShape.queries)
    parser.add_argument("--incremental", type=int, default=2000, help="items timed incrementally")
    parser.add_argument("--brute", type=int, default=30, help="of those, items timed by brute force")
    parser.add_argument("--rebuild", type=int, default=3, help="of those, items timed with a rebuilt index")
    parser.add_argument(
        "--generic-per-query",
        type=int,
        default=CatalogShape.generic_per_query,
        help="generic keywords per query (they make retrieved sets large)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.rebuild <= args.brute <= args.incremental <= args.items:
        parser.error("need 1 <= --rebuild <= --brute <= --incremental <= --items")
    shape = CatalogShape(
        items=args.items, queries=args.queries, generic_per_query=args.generic_per_query, seed=args.seed
    )
    result = run_benchmark(shape, args.incremental, args.brute, args.rebuild)
    print(format_report(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

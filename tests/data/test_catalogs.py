"""Item catalogs (rankrl/data/catalogs.py): binary relevance, WANDS files written in WANDS's format, the DL
judged pools with a seeded split, and loading on first use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rankrl.data import load_benchmark
from rankrl.data.catalogs import Catalog, CatalogOnDemand, binarize, load_catalog
from rankrl.data.errors import MissingDataError

from .conftest import ITEMS, QUERIES, RELEVANT, toy_catalog


def test_queries_without_a_relevant_item_are_left_out():
    """set_prf(empty, empty) = 1 would make such a query perfect for retrieving nothing: binarize drops it
    (as trec_eval leaves unjudged queries out), and a catalog built by hand with one is refused."""
    relevant = binarize({"q1": {"i1": 2, "i2": 0}, "q2": {"i3": 0}, "q3": {}}, level=1, items=ITEMS)
    assert relevant == {"q1": frozenset({"i1"})}
    with pytest.raises(ValueError, match="without a relevant item"):
        Catalog("toy", dict(ITEMS), dict(QUERIES), {**RELEVANT, "q4": frozenset()}, {"validation": ["q4"]})


def test_split_names_the_valid_ones_and_a_catalog_object_is_loaded_as_it_is():
    catalog = toy_catalog()
    assert catalog.split("validation") == ["q4"]
    with pytest.raises(KeyError, match="valid: train, validation"):
        catalog.split("test")
    assert load_catalog(catalog, "unused") is catalog


PRODUCT_HEADER = (
    "product_id\tproduct_name\tproduct_class\tcategory hierarchy\tproduct_description\t"
    "product_features\trating_count\taverage_rating\treview_count\n"
)


def write_wands(folder: Path, query_csv: Path, labels: list[tuple[str, str, str]], products: int = 4) -> None:
    """product.csv and label.csv in WANDS's tab-separated format, beside the real query.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(query_csv, folder / "query.csv")
    rows = [
        f'{p}\tproduct {p}\tBeds\tFurniture / Beds\ta "quoted" description {p}\tcolor:grey\t1.0\t4.0\t1.0\n'
        for p in range(products)
    ]
    (folder / "product.csv").write_text(PRODUCT_HEADER + "".join(rows))
    (folder / "label.csv").write_text(
        "id\tquery_id\tproduct_id\tlabel\n"
        + "".join(f"{n}\t{q}\t{p}\t{lab}\n" for n, (q, p, lab) in enumerate(labels))
    )


def test_wands_catalog_binarises_exact_and_partial_and_splits_430_50(tmp_path, data_dir):
    queries = [
        line.split("\t")[0] for line in (data_dir / "wands" / "query.csv").read_text().splitlines()[1:]
    ]
    labels = [(q, str(n % 4), ("Exact", "Partial", "Irrelevant")[n % 3]) for n, q in enumerate(queries)]
    labels += [(q, "3", "Partial") for q in queries if q not in {"0", "1"}]
    labels += [("0", "0", "Irrelevant"), ("1", "1", "Irrelevant")]  # (later rows overwrite the pair's label)
    write_wands(tmp_path / "wands", data_dir / "wands" / "query.csv", labels)
    catalog = load_catalog("wands", tmp_path)
    assert len(catalog.items) == 4 and catalog.items["0"].title == "product 0"
    assert '"quoted" description 0' in catalog.items["0"].text
    assert set(catalog.queries) == set(queries) - {"0", "1"}  # no relevant product left: out of both splits
    label = {(q, p): lab for q, p, lab in labels}
    for qid, rel in catalog.relevant.items():
        assert rel == {p for p in "0123" if label.get((qid, p)) in ("Exact", "Partial")}
    sizes = {k: len(v) for k, v in catalog.splits.items()}
    assert sizes["train"] + sizes["validation"] == 478 and not set(catalog.splits["train"]) & set(
        catalog.splits["validation"]
    )
    full = load_catalog("wands", tmp_path, num_test=50, seed=0)
    assert full.splits == catalog.splits and load_catalog("wands", tmp_path, seed=1).splits != catalog.splits
    # the 50 validation queries are the loader's seeded 430/50 split, minus queries with nothing relevant
    bench = load_benchmark("wands", tmp_path, num_test=50, seed=0)
    assert catalog.splits["validation"] == [q for q in bench.splits["test"] if q in catalog.relevant]
    assert len(bench.splits["train"]) == 430 and len(bench.splits["test"]) == 50


def test_dl_pools_catalog_is_judged_pools_with_a_seeded_split(data_dir):
    options = {
        "max_queries": 12,
        "relevant_per_query": 2,
        "passages_per_query": 5,
        "num_validation": 4,
        "seed": 0,
    }
    catalog = load_catalog("dl-pools-cpu", data_dir, **options)
    assert catalog.name == "dl-pools-cpu" and len(catalog.queries) == 12
    assert {k: len(v) for k, v in catalog.splits.items()} == {"train": 8, "validation": 4}
    assert sorted(catalog.splits["train"] + catalog.splits["validation"]) == sorted(catalog.queries)
    assert len(catalog.items) <= 12 * 5 and all(1 <= len(r) for r in catalog.relevant.values())
    qrels = {**load_benchmark("dl19", data_dir).qrels, **load_benchmark("dl20", data_dir).qrels}
    for qid, rel in catalog.relevant.items():  # relevant = judged >= 2, nothing else
        assert rel == {d for d, g in qrels[qid].items() if g >= 2 and d in catalog.items}
    again = load_catalog("dl-pools-cpu", data_dir, **options)
    assert again.fingerprint() == catalog.fingerprint()
    assert (
        load_catalog("dl-pools-cpu", data_dir, **{**options, "seed": 1}).fingerprint()
        != catalog.fingerprint()
    )
    with pytest.raises(ValueError, match="no catalog 'msmarco'; valid: wands"):
        load_catalog("msmarco", data_dir)


class Holder(CatalogOnDemand):
    def __init__(self, name: str, data_dir: Path) -> None:
        self._catalog_args = (name, data_dir, {})


def test_a_missing_file_stops_at_first_use_with_the_fetch_command(tmp_path, data_dir):
    """Not in the constructor: Hydra would wrap the data layer's error in its own exception."""
    (tmp_path / "wands").mkdir()
    shutil.copy(data_dir / "wands" / "query.csv", tmp_path / "wands")
    holder = Holder("wands", tmp_path)
    with pytest.raises(MissingDataError, match="--only wands"):
        _ = holder.catalog
    write_wands(tmp_path / "wands", data_dir / "wands" / "query.csv", [("0", "0", "Exact")])
    assert holder.catalog is holder.catalog and list(holder.catalog.queries) == ["0"]

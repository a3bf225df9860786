"""WANDS: the real query.csv plus product.csv / label.csv written in WANDS's format."""

from __future__ import annotations

import shutil

import pytest

from rankrl.data import MalformedDataError, MissingDataError, load_benchmark

from .conftest import write_text

PRODUCT_HEADER = (
    "product_id\tproduct_name\tproduct_class\tcategory hierarchy\tproduct_description\t"
    "product_features\trating_count\taverage_rating\treview_count\n"
)
PRODUCTS = [
    (
        "0",
        "solid wood platform bed",
        "Beds",
        "Furniture / Bedroom Furniture / Beds & Headboards / Beds",
        'good, deep sleep can be quite difficult to have in this busy age . "sturdy" frame',
        "overallwidth-sidetoside:64.7|dsprimaryproductstyle:modern",
        "15.0",
        "4.5",
        "15.0",
    ),
    (
        "1",
        "all-clad 7 qt . slow cooker",
        "Slow Cookers",
        "Kitchen & Tabletop / Small Kitchen Appliances",
        "",
        "capacityquarts:7|producttype:slow cooker",
        "",
        "",
        "",
    ),
    (
        "2",
        "salon chair",
        "Massage Chairs",
        "Furniture / Living Room Furniture / Chairs",
        "a chair for the salon",
        "color:black",
        "100.0",
        "4.0",
        "98.0",
    ),
]


def _write_wands(folder, query_csv, labels):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(query_csv, folder / "query.csv")
    write_text(folder / "product.csv", PRODUCT_HEADER + "".join("\t".join(p) + "\n" for p in PRODUCTS))
    write_text(
        folder / "label.csv",
        "id\tquery_id\tproduct_id\tlabel\n"
        + "".join(f"{i}\t{q}\t{p}\t{lab}\n" for i, (q, p, lab) in enumerate(labels)),
    )


def test_wands_grades_and_430_50_split(tmp_path, data_dir):
    labels = [("0", "2", "Exact"), ("0", "0", "Irrelevant"), ("0", "1", "Partial"), ("25", "0", "Exact")]
    _write_wands(tmp_path / "wands", data_dir / "wands" / "query.csv", labels)
    bench = load_benchmark("wands", tmp_path)
    assert len(bench.queries) == 480 and len(bench.corpus) == 3
    assert (
        bench.queries["0"].text == "salon chair"
        and bench.queries["0"].extra["query_class"] == "Massage Chairs"
    )
    assert bench.qrels["0"] == {"2": 2, "0": 0, "1": 1}
    assert bench.relevance_level == 1
    assert {name: len(q) for name, q in bench.splits.items()} == {"train": 430, "test": 50}
    assert not set(bench.splits["train"]) & set(bench.splits["test"])
    assert load_benchmark("wands", tmp_path).splits == bench.splits
    assert load_benchmark("wands", tmp_path, seed=1).splits != bench.splits
    bed = bench.corpus["0"]
    assert bed.title == "solid wood platform bed" and '"sturdy" frame' in bed.text
    assert bed.extra["category_hierarchy"] == ["Furniture", "Bedroom Furniture", "Beds & Headboards", "Beds"]
    assert bench.corpus["1"].text == "" and bench.corpus["1"].extra["rating_count"] == ""


def test_wands_unknown_label_is_malformed(tmp_path, data_dir):
    _write_wands(tmp_path / "wands", data_dir / "wands" / "query.csv", [("0", "2", "Perfect")])
    with pytest.raises(MalformedDataError, match="label.csv.*'Perfect'"):
        load_benchmark("wands", tmp_path)


def test_wands_without_products_says_where_they_come_from(tmp_path, data_dir):
    # query.csv alone, as `make data` leaves it where only the shared copy is reachable
    (tmp_path / "wands").mkdir()
    shutil.copy(data_dir / "wands" / "query.csv", tmp_path / "wands")
    with pytest.raises(MissingDataError, match="product.csv") as err:
        load_benchmark("wands", tmp_path)
    assert "--only wands" in str(err.value) and "wayfair/WANDS" in str(err.value)


def test_wands_missing_column_is_malformed(tmp_path, data_dir):
    _write_wands(tmp_path / "wands", data_dir / "wands" / "query.csv", [])
    write_text(tmp_path / "wands" / "product.csv", "product_id\tproduct_name\n0\tbed\n")
    with pytest.raises(MalformedDataError, match="product_class"):
        load_benchmark("wands", tmp_path)

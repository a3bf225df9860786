"""Image benchmarks: COCO-CN and CIRR on the real subsets; Flickr30k-CN, CVLUE, XM3600 and WIT on
small files in their public formats. No image file exists anywhere here: loaders need only paths."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from rankrl.data import load_benchmark, split_corpus

from .conftest import write_jsonl, write_text


@pytest.fixture(scope="module")
def coco_cn(data_dir):
    return load_benchmark("coco-cn", data_dir)


def test_coco_cn_captions_and_splits(coco_cn, data_dir):
    assert len(coco_cn.queries) == 22218 and len(coco_cn.corpus) == 20341
    gallery = {s: len(split_corpus(coco_cn, s)) for s in ("train", "dev", "test")}
    assert gallery == {"train": 18341, "dev": 1000, "test": 1000}
    query = coco_cn.queries["COCO_train2014_000000573854#0"]
    assert query.text == "机场跑道的喷气式飞机正准备起飞。"
    assert coco_cn.qrels[query.qid] == {"COCO_train2014_000000573854": 1}
    image = coco_cn.corpus["COCO_val2014_000000043734"]
    assert image.extra["image_path"].endswith("coco-cn/images/val2014/COCO_val2014_000000043734.jpg")
    assert image.extra["tags"] == ["水", "波浪", "狗"]
    for split, qids in coco_cn.splits.items():  # a caption is in its image's split
        assert all(
            coco_cn.corpus[coco_cn.queries[q].extra["image_id"]].extra["split"] == split for q in qids[:500]
        )


def test_coco_cn_manual_translations_cover_the_test_split(tmp_path, data_dir):
    folder = tmp_path / "coco-cn"  # the archive alone, as `make data` leaves it (images are never here)
    folder.mkdir()
    shutil.copy(data_dir / "coco-cn" / "coco-cn-version1805.tar.gz", folder)
    bench = load_benchmark("coco-cn", tmp_path, captions="translated", image_root="/imgs")
    # the archive is read in place: nothing is unpacked next to it
    assert [p.name for p in folder.iterdir()] == ["coco-cn-version1805.tar.gz"]
    assert len(bench.queries) == 5000 and list(bench.splits) == ["test"]
    first = bench.queries["COCO_train2014_000000503310#zhm#3"]
    assert first.text == "机舱内有蓝色和黑色相间的条纹座椅。"
    assert bench.corpus[first.extra["image_id"]].extra["image_path"] == str(
        Path("/imgs/train2014/COCO_train2014_000000503310.jpg")
    )
    with pytest.raises(ValueError, match="human"):
        load_benchmark("coco-cn", data_dir, captions="english")


def test_cirr_val_and_test1(data_dir):
    bench = load_benchmark("cirr", data_dir)
    assert {s: len(q) for s, q in bench.splits.items()} == {"dev": 4181, "test": 4148}
    assert len(split_corpus(bench, "dev")) == 2297 and len(split_corpus(bench, "test")) == 2315
    assert set(bench.qrels) == set(bench.splits["dev"])  # test1 targets are not public
    query = bench.queries["12060"]
    assert query.text == "show three bottles of soft drink"
    assert query.extra["reference_image"] == "dev-244-0-img0"
    assert bench.qrels["12060"] == {"dev-1028-1-img1": 1}
    assert len(query.extra["image_set"]) == 6
    for qid in bench.splits["dev"]:
        target = next(iter(bench.qrels[qid]))
        assert bench.corpus[target].extra["split"] == "dev"
        assert bench.corpus[bench.queries[qid].extra["reference_image"]].extra["split"] == "dev"
    with pytest.raises(ValueError, match="valid"):
        load_benchmark("cirr", data_dir, splits=["val"])


def test_flickr30k_cn_chinese_clip_layout(tmp_path):
    folder = tmp_path / "flickr30k-cn"
    write_jsonl(
        folder / "train_texts.jsonl",
        [
            {"text_id": 1, "text": "两只狗在草地上奔跑", "image_ids": [1000092795]},
            {"text_id": 2, "text": "一个人骑自行车", "image_ids": [10002456]},
        ],
    )
    write_jsonl(
        folder / "valid_texts.jsonl", [{"text_id": 1, "text": "海边的日落", "image_ids": [1007129816]}]
    )
    write_jsonl(
        folder / "test_texts.jsonl", [{"text_id": 7, "text": "厨房里的女人", "image_ids": [1009434119]}]
    )
    bench = load_benchmark("flickr30k-cn", tmp_path)
    assert bench.splits == {"train": ["train-1", "train-2"], "dev": ["dev-1"], "test": ["test-7"]}
    assert bench.queries["dev-1"].text == "海边的日落"
    assert bench.qrels["train-1"] == {"1000092795": 1}
    assert bench.corpus["1000092795"].extra["image_path"] == str(folder / "images" / "1000092795.jpg")
    assert list(split_corpus(bench, "test")) == ["1009434119"]


def test_cvlue_both_annotation_layouts(tmp_path):
    folder = tmp_path / "cvlue"
    train = [
        {"image": "A/1-panda/A-1-1.png", "caption": "竹子旁的熊猫", "image_id": 1},
        {"image": "A/1-panda/A-1-1.png", "caption": "一只熊猫", "image_id": 1},
    ]
    cows = ["水里有三头牛", "岸上的牛"]
    evaluation = [{"image": "B/2-cow/B-2-3.png", "caption": cows, "image_id": 2}]
    write_text(folder / "IC_train.json", json.dumps(train, ensure_ascii=False))
    write_text(folder / "IC_val.json", json.dumps(evaluation, ensure_ascii=False))
    write_text(folder / "IC_test.json", json.dumps(evaluation, ensure_ascii=False))
    bench = load_benchmark("cvlue", tmp_path, image_root="/cvlue/pics")
    assert bench.splits == {
        "train": ["train-0", "train-1"],
        "dev": ["dev-0", "dev-1"],
        "test": ["test-0", "test-1"],
    }
    assert bench.queries["dev-1"].text == "岸上的牛"
    assert bench.qrels["train-1"] == {"A/1-panda/A-1-1.png": 1}
    assert bench.corpus["B/2-cow/B-2-3.png"].extra["image_path"] == str(Path("/cvlue/pics/B/2-cow/B-2-3.png"))


def test_xm3600_captions_by_language(tmp_path):
    rows = [
        {
            "image/key": f"{i:016x}",
            "en": {"caption": [f"a photo {i}", f"another {i}"]},
            "zh": {"caption": [f"照片 {i}"]},
            "sw": {"caption": [f"picha {i}"]},
        }
        for i in range(30)
    ]
    write_jsonl(tmp_path / "xm3600" / "captions.jsonl", rows)
    bench = load_benchmark("xm3600", tmp_path)
    assert len(bench.queries) == 30 * 4 and len(bench.corpus) == 30
    assert {s: len(split_corpus(bench, s)) for s in ("train", "dev", "test")} == {
        "train": 24,
        "dev": 3,
        "test": 3,
    }
    key = rows[0]["image/key"]
    assert bench.queries[f"{key}/en/1"].text == "another 0"
    assert bench.qrels[f"{key}/zh/0"] == {key: 1}
    zh = load_benchmark("xm3600", tmp_path, languages=["zh"])
    assert {q.extra["language"] for q in zh.queries.values()} == {"zh"} and len(zh.queries) == 30
    assert zh.splits.keys() == bench.splits.keys()


WIT_COLUMNS = [
    "language",
    "page_url",
    "image_url",
    "page_title",
    "section_title",
    "hierarchical_section_title",
    "caption_reference_description",
    "caption_attribution_description",
    "caption_alt_text_description",
    "mime_type",
    "original_height",
    "original_width",
    "is_main_image",
    "attribution_passes_lang_id",
    "page_changed_recently",
    "context_page_description",
    "context_section_description",
]


def _wit_row(i: int, language: str = "en", section: str | None = None) -> list[str]:
    values = {c: "" for c in WIT_COLUMNS}
    values.update(
        language=language,
        page_url=f"https://en.wikipedia.org/wiki/Page_{i}",
        image_url=f"https://upload.wikimedia.org/wikipedia/commons/a/ab/Image_{i}.PNG",
        page_title=f"Page {i}",
        context_page_description=" ".join(["page"] * 30),
        context_section_description=section if section is not None else " ".join([f"word{i}"] * 25),
    )
    return [values[c] for c in WIT_COLUMNS]


def test_wiki_image_from_wit_shards(tmp_path):
    rows = [_wit_row(i) for i in range(20)] + [_wit_row(20, "de"), _wit_row(21, section="too short")]
    rows.append(_wit_row(22, section=""))  # falls back to the page description
    with gzip.open(tmp_path / "wit.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("\t".join(WIT_COLUMNS) + "\n" + "".join("\t".join(r) + "\n" for r in rows))
    (tmp_path / "wiki-image").mkdir()
    (tmp_path / "wit.tsv.gz").rename(tmp_path / "wiki-image" / "wit_v1.val.all-00000-of-00005.tsv.gz")
    bench = load_benchmark("wiki-image", tmp_path)
    assert len(bench.queries) == 21 and len(bench.corpus) == 21
    texts = {q.extra["page_title"]: q.text for q in bench.queries.values()}
    assert texts["Page 3"] == " ".join(["word3"] * 25) and texts["Page 22"].startswith("page page")
    assert "Page 20" not in texts and "Page 21" not in texts
    for qid in bench.queries:
        image = bench.corpus[next(iter(bench.qrels[qid]))]
        assert image.extra["image_path"].endswith(".png") and image.extra["image_url"].endswith(".PNG")
        assert qid in bench.splits[image.extra["split"]]
    assert len(load_benchmark("wiki-image", tmp_path, max_queries=5).queries) == 5

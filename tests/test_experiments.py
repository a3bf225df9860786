"""Every experiment's task builds and answers one evaluation query with the tiny model.

Composition alone (tests/config) cannot catch a task whose constructor rejects its config, or whose
evaluation breaks on real data; this runs each experiment's own evaluation path, cut to one query.
Experiments whose data no build machine has (WANDS products, BRIGHT documents, images) run on small files
this test writes in the benchmark's own on-disk format (``FIXTURE_DATA``), read by the real loaders; TREC DL
rows read its prepared files cut to a few queries (GRAPE's rank the whole corpus with MiniLM). A separate test
checks that a missing file stops with the data layer's error naming the command that fetches it.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rankrl.data.errors import MissingDataError
from tests.conftest import compose, experiment_names

# ---- small files in the real formats of the benchmarks no build machine has --------------------------------

WANDS_PRODUCTS = [  # (name, class, category hierarchy, description)
    ("grey sofa bed", "Sleeper Sofas", "Furniture / Living Room / Sofas", "a grey sofa bed for small rooms"),
    ("leather recliner sofa", "Sofas", "Furniture / Living Room / Sofas", 'a "soft" leather sofa, recliner'),
    ("brass desk lamp", "Desk Lamps", "Lighting / Lamps / Desk Lamps", "a brass desk lamp with a shade"),
    ("arc floor lamp", "Floor Lamps", "Lighting / Lamps / Floor Lamps", "an arc floor lamp, black metal"),
    ("oak dining table", "Dining Tables", "Furniture / Kitchen / Tables", "a solid oak dining table for six"),
    ("glass coffee table", "Coffee Tables", "Furniture / Living Room / Tables", "a round glass coffee table"),
    ("wool area rug", "Area Rugs", "Rugs / Area Rugs", "a hand woven wool area rug, blue"),
    ("salon chair", "Massage Chairs", "Furniture / Salon / Chairs", "a hydraulic salon chair"),
]
WANDS_QUERY_WORDS = ["sofa", "lamp", "table", "rug", "chair"]
WANDS_LABELS = ("Exact", "Partial")


def write_wands(data: Path) -> None:
    """``wands/{query,product,label}.csv``, tab-separated with WANDS's headers (rankrl.data.products): 60
    queries (conf/benchmark/wands.yaml's split holds 50 out for validation), 8 products, and labels for 4
    training and 2 validation queries only, so that the catalog (labelled queries only) stays a few prompts
    long."""
    folder = data / "wands"
    folder.mkdir(parents=True)
    adjectives = "grey brass oak glass wool leather small modern round black big new".split()
    queries = [f"{a} {w}" for a in adjectives for w in WANDS_QUERY_WORDS]  # 60
    (folder / "query.csv").write_text(
        "query_id\tquery\tquery_class\n" + "".join(f"{q}\t{text}\tHome\n" for q, text in enumerate(queries))
    )
    (folder / "product.csv").write_text(
        "product_id\tproduct_name\tproduct_class\tcategory hierarchy\tproduct_description\t"
        "product_features\trating_count\taverage_rating\treview_count\n"
        + "".join(
            f"{p}\t{name}\t{cls}\t{path}\t{text}\tcolor:grey|material:wood\t3.0\t4.5\t2.0\n"
            for p, (name, cls, path, text) in enumerate(WANDS_PRODUCTS)
        )
    )
    (folder / "label.csv").write_text("id\tquery_id\tproduct_id\tlabel\n")
    from rankrl.config import CONFIG_DIR
    from rankrl.data import load_benchmark

    options = OmegaConf.load(CONFIG_DIR / "benchmark" / "wands.yaml").options  # num_test, seed
    splits = load_benchmark("wands", data, **options).splits  # the loader's own seeded split
    labelled = splits["train"][:4] + splits["test"][:2]
    rows = []
    for qid in labelled:
        word = queries[int(qid)].split()[1]
        for p, (name, *_) in enumerate(WANDS_PRODUCTS):
            label = WANDS_LABELS[p % 2] if word in name else "Irrelevant"
            rows.append(f"{len(rows)}\t{qid}\t{p}\t{label}\n")
    (folder / "label.csv").write_text("id\tquery_id\tproduct_id\tlabel\n" + "".join(rows))


BRIGHT_TOPICS = [  # (query, gold documents)
    ("why are insects attracted to light at night", ["insects/phototaxis_0.txt", "insects/phototaxis_1.txt"]),
    ("how do plants sense gravity in their roots", ["plants/gravitropism_0.txt"]),
    ("why do we get goosebumps when we are cold", ["humans/piloerection_0.txt"]),
]


def write_bright(data: Path, task: str = "biology") -> None:
    """``bright/topics.bright-<task>-original.jsonl.gz``, ``qrels.bright-<task>.txt`` and the documents
    parquet file (rankrl.data.trec.load_bright): three queries, each with its gold documents and one excluded
    id (BRIGHT drops it before scoring), among unrelated fillers."""
    import pandas as pd

    from rankrl.data.trec import bright_documents_file

    folder = data / "bright"
    (folder / "documents").mkdir(parents=True)
    topics, qrels, docs = [], [], {}
    for qid, (query, gold) in enumerate(BRIGHT_TOPICS):
        excluded = f"excluded/copy of question {qid}.txt"  # BRIGHT's ids may hold spaces: read as "_"
        ids = {"gold_ids": gold, "excluded_ids": [excluded, "N/A"]}
        topics.append({"id": str(qid), "query": query, "reasoning": "", "gold_answer": "", **ids})
        qrels += [f"{qid}\t0\t{d}\t1\n" for d in gold]
        docs.update({d: f"{query}: an answer, part {n}" for n, d in enumerate(gold)})
        docs[excluded] = f"{query} {query}"
    docs.update({f"filler/{n}.txt": f"unrelated text about topic number {n}" for n in range(12)})
    with gzip.open(folder / f"topics.bright-{task}-original.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(t) + "\n" for t in topics))
    (folder / f"qrels.bright-{task}.txt").write_text("".join(qrels))
    pd.DataFrame({"id": list(docs), "content": list(docs.values())}).to_parquet(
        folder / "documents" / bright_documents_file(task)
    )


def write_flickr30k_cn(data: Path) -> None:
    """Ten scikit-image photographs with captions in Flickr30k-CN's layout (the GRAPE smoke's benchmark)."""
    from rankrl.data.smoke import write_photo_benchmark

    write_photo_benchmark(data)


def write_wiki_image(data: Path) -> None:
    """A WIT shard ``wiki-image/wit.tsv`` (rankrl.data.images_web.load_wiki_image) of 20 English section
    texts of over 20 words, each with its own image URL, and the images where the loader expects them (the
    scikit-image photographs, each under two URLs): 16 train / 2 dev / 2 test images by the seeded split."""
    from rankrl.data import load_benchmark
    from rankrl.data.images_web import WIT_TEXT_FIELDS
    from rankrl.data.smoke import PHOTOS, write_photo_benchmark

    photos = write_photo_benchmark(data / "photos") / "images"
    folder = data / "wiki-image"
    folder.mkdir(parents=True)
    columns = ["language", "page_url", "image_url", "page_title", *WIT_TEXT_FIELDS]
    rows = []
    for copy in range(2):
        for name, (caption, _) in PHOTOS.items():
            text = (
                f"{caption}, as the article shows in its {copy + 1}. section: the photograph was taken for "
                "an encyclopedia page that describes the subject, its history and where it can be found"
            )
            url = f"https://upload.wikimedia.org/commons/{copy}/{name}.jpg"
            rows.append(f"en\thttps://en.wikipedia.org/wiki/{name}_{copy}\t{url}\t{name}\t{text}\t\n")
    (folder / "wit.tsv").write_text("\t".join(columns) + "\n" + "".join(rows))
    for doc in load_benchmark("wiki-image", data).corpus.values():  # the paths the loader gives each image
        name = Path(doc.extra["image_url"]).stem
        Path(doc.extra["image_path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(photos / f"{name}.jpg", doc.extra["image_path"])


def write_trec_dl_cut(data: Path, queries: int = 2, depth: int = 20) -> None:
    """TREC DL's own prepared files (``make data``) cut to the first ``queries`` judged queries of each year
    with a highly relevant passage among their BM25 top ``depth``, and to that top ``depth``: the real loader
    and real text, but a corpus of ~80 passages instead of the 9,658 that GRAPE's CPU rows rank with MiniLM
    (whose first encoding takes a fresh machine minutes)."""
    from rankrl.data.trec import TREC_DL_DIR, TREC_DL_FILES
    from tests.conftest import require_data

    source = require_data(TREC_DL_DIR) / TREC_DL_DIR
    folder = data / TREC_DL_DIR
    folder.mkdir(parents=True)
    for topics, qrels, hits, run in TREC_DL_FILES.values():
        relevant = {
            (q, d)
            for q, _, d, rel in (line.split() for line in (source / qrels).read_text().splitlines())
            if int(rel) >= 2
        }
        entries = json.loads((source / hits).read_text())
        for e in entries:
            e["hits"] = e["hits"][:depth]
        kept = [e for e in entries if any((str(h["qid"]), str(h["docid"])) in relevant for h in e["hits"])][
            :queries
        ]
        keep = {str(e["hits"][0]["qid"]) for e in kept}
        assert len(keep) == queries, hits
        (folder / hits).write_text(json.dumps(kept))
        for name in (topics, qrels, run):  # each line starts with its query id; run lines hold their rank
            lines = (source / name).read_text().splitlines(keepends=True)
            (folder / name).write_text(
                "".join(
                    line
                    for line in lines
                    if line.split()[0] in keep and (name != run or int(line.split()[3]) <= depth)
                )
            )


# benchmark (conf/benchmark/<name>.yaml) -> the writer of its fixture data; every experiment whose default
# benchmark is one of these runs on the fixture instead of the prepared data folder
FIXTURE_DATA: dict[str, Callable[[Path], None]] = {
    "wands": write_wands,
    "dl19": write_trec_dl_cut,  # the prepared files, cut (both years: a DL19 row trains on DL20)
    "dl20": write_trec_dl_cut,
    "bright-biology": write_bright,
    "flickr30k-cn": write_flickr30k_cn,
    "wiki-image": write_wiki_image,
}


def _minilm(folder: Path) -> Path:
    from rankrl.retrieval.dense import bundled_minilm_path

    return bundled_minilm_path()


def _tiny_splade(folder: Path) -> Path:
    from tests.retrieval.test_splade import build_tiny_splade

    return build_tiny_splade(folder / "tiny-splade")


# Retrievers whose weights exist only on the model hub (CoGR's paper-scale baselines): the same code path
# with weights this machine has (MiniLM for the 4B embedding model, a tiny random SPLADE): never numbers
HUB_RETRIEVER_STAND_INS: dict[str, Callable[[Path], Path]] = {
    "qwen3-embedding-4b": _minilm,
    "splade-v2": _tiny_splade,
}


def evaluation_config(experiment: str, tmp_path: Path, model_dir: Path, fixture: bool | None = None):
    """The experiment's evaluate config cut to one query of the tiny model; with ``fixture`` (default: when
    ``FIXTURE_DATA`` has its benchmark) its data folder is the fixture under tmp_path, written here, with the
    caches beside it (keyword sets, indexes and vectors of fixture data stay out of the real cache)."""
    # the transformers engine: this checks each task's evaluation path in one process, where every vLLM
    # engine would stay for good (rankrl.rollout.vllm); the engines are checked in tests/rollout
    overrides = [
        f"experiment={experiment}",
        "model=tiny",
        "rollout=hf",
        "logger=none",
        "eval_limit=1",
        "evaluation.sampling.max_new_tokens=8",
        f"paths.log_dir={tmp_path}",
    ]
    cfg = compose("evaluate", overrides)
    if fixture is None:
        fixture = cfg.benchmark.name in FIXTURE_DATA
    if fixture:
        data = tmp_path / "data"
        FIXTURE_DATA[cfg.benchmark.name](data)
        overrides += [
            f"paths.data_dir={data}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.model_dir={model_dir}",
        ]
        if "pretrained" in cfg.retriever:  # CLIP: no weights on the build machines
            # random weights (the retriever configs' `pretrained: null`): checks the code path, never numbers
            overrides.append("retriever.pretrained=null")
        if cfg.retriever.get("name") in HUB_RETRIEVER_STAND_INS:  # paper-scale encoders: hub weights only
            stand_in = HUB_RETRIEVER_STAND_INS[cfg.retriever.name](tmp_path / "models")
            overrides.append(f"retriever.model_path={stand_in}")
        cfg = compose("evaluate", overrides)
        assert cfg.task.data_dir == str(data)
    OmegaConf.update(cfg, "paths.output_dir", str(tmp_path / "run"))
    return cfg


@pytest.mark.parametrize("experiment", experiment_names())
def test_experiment_evaluates_one_query_with_the_tiny_model(experiment, tmp_path, data_dir, model_dir):
    from rankrl.evaluate import evaluate

    record = evaluate(evaluation_config(experiment, tmp_path, model_dir))
    assert record["metrics"], record
    assert all(isinstance(v, float) for v in record["metrics"].values())
    assert (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.parametrize(
    "experiment,missing,fetch",
    [
        ("cogr/bm25_cutoff", "wands/product.csv", "--only wands"),
        ("rankr1/bm25_bright", "bright/documents/biology-00000-of-00001.parquet", "--only bright-biology"),
        ("grape/raw_query", "flickr30k-cn/images/moon.jpg", "--only flickr30k-cn"),
    ],
    ids=["wands-products", "bright-documents", "flickr30k-cn-image"],
)
def test_a_missing_data_file_stops_with_the_command_that_fetches_it(
    experiment, missing, fetch, tmp_path, model_dir
):
    """The fixture with one file taken away: the run stops with the data layer's error, which names that
    file and the command that fetches it (evaluation-only rows: no model loads before the data)."""
    from rankrl.evaluate import evaluate

    cfg = evaluation_config(experiment, tmp_path, model_dir, fixture=True)
    (tmp_path / "data" / missing).unlink()
    with pytest.raises(MissingDataError) as err:
        evaluate(cfg)
    message = str(err.value)
    assert missing in message and "make data" in message and f"rankrl.data.prepare {fetch}" in message

"""Where every data file comes from: public URLs, pinned to commits where the origin is a git repository.

One ``Source`` per folder of the data directory (the folder names of the shared data copy). The
sources marked ``default`` are the small ones that a plain ``make data`` fetches (the shared copy
holds exactly these); the large ones (MS MARCO, BRIGHT documents, image sets) are fetched only when
named with ``--only``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from rankrl.data.trec import BRIGHT_TASKS, bright_documents_file


@dataclass(frozen=True)
class Remote:
    """One file to download.

    Args:
        name: its path under the source's folder.
        url: where it comes from.
        unpack: a zip / tar archive to unpack into the folder (or ``into``) after download.
        into: sub-folder to unpack into.
        members: unpack only these archive members (file names), None for all.
        optional: a failed download is a warning, not an error (files the loaders can do without).
        flatten: unpack the members into the folder itself, whatever folders the archive puts them in
            (an archive whose layout its authors may change; the loaders read ``<folder>/<member>``).
        sha256: the file's SHA-256, checked after download (a mismatch deletes it and fails): an origin
            served over plain http is pinned this way.
    """

    name: str
    url: str
    unpack: bool = False
    into: str = ""
    members: tuple[str, ...] | None = None
    optional: bool = False
    flatten: bool = False
    sha256: str | None = None


@dataclass(frozen=True)
class Source:
    """A folder of the data directory and how to fill it.

    Args:
        name: what ``--only`` takes (besides the names of the benchmarks listed here).
        folder: the folder under the data directory.
        benchmarks: benchmarks that read this folder.
        remotes: files to download when there is no shared copy.
        default: fetched by a plain ``prepare`` (no ``--only``).
        note: a step no download can do (images granted on request ...), printed after the status.
    """

    name: str
    folder: str
    benchmarks: tuple[str, ...]
    remotes: tuple[Remote, ...]
    default: bool = True
    note: str = ""


def github(repo: str, commit: str, path: str) -> str:
    """A file of a GitHub repository at a commit (``/raw/`` also resolves Git LFS files)."""
    return f"https://github.com/{repo}/raw/{commit}/{path}"


RANK_LLM = ("castorini/rank_llm", "916102c7de2f7348a64427b89300946657997098")
ANSERINI_TOOLS = ("castorini/anserini-tools", "5b819c1a45c8a0a3ec9426f476694f44a29dfaf3")
HIPPORAG = ("yhshu/HippoRAG", "c3424ec2093367327ddfe3e9dd8b31c399af12af")
# MuSiQue v1.0 as its authors distribute it: the Google Drive file linked from the README of
# github.com/StonyBrookNLP/musique (their download_data.sh fetches the same id with gdown); `confirm=t`
# skips Drive's page about files too large to scan. The zip holds MuSiQue-Ans and -Full, train/dev/test.
MUSIQUE_V1_ZIP = "https://drive.usercontent.google.com/download?id=1tGdADlNjWFaHLeZZGShh2IRcpO6Lv24h&export=download&confirm=t"
# HotpotQA v1 as its authors distribute it (hotpotqa.github.io; the download script of
# github.com/hotpotqa/hotpot): the training set (distractor paragraphs included) and the distractor dev set.
# The server speaks plain http, so each file is pinned by the SHA-256 that ParlAI's HotpotQA task pins
# (facebookresearch/ParlAI, parlai/tasks/hotpotqa/build.py).
HOTPOTQA_RELEASE = "http://curtis.ml.cmu.edu/datasets/hotpot"
HOTPOTQA_FILES = {
    "hotpot_train_v1.1.json": "26650cf50234ef5fb2e664ed70bbecdfd87815e6bffc257e068efea5cf7cd316",
    "hotpot_dev_distractor_v1.json": "4e9ecb5c8d3b719f624d66b60f8d56bf227f03914f5f0753d6fa1b359d7104ea",
}
CIRR = ("Cuberick-Orion/CIRR", "2276fba2d2c53862c8ae79ea18e1f1ae03719f56")
BRIGHT_HUB = "https://huggingface.co/datasets/xlangai/BRIGHT/resolve/3066d29c9651a576c8aba4832d249807b181ecae"


def _trec_dl() -> Source:
    remotes = []
    for year, topics in (("19", "topics.dl19-passage.txt"), ("20", "topics.dl20.txt")):
        remotes += [
            Remote(
                f"bm25_retrieve_results_dl{year}.json",
                github(*RANK_LLM, f"retrieve_results/BM25/retrieve_results_dl{year}.json"),
            ),
            Remote(
                f"bm25_trec_results_dl{year}.txt",
                github(*RANK_LLM, f"retrieve_results/BM25/trec_results_dl{year}.txt"),
            ),
            Remote(
                f"qrels.dl{year}-passage.txt", github(*ANSERINI_TOOLS, f"qrels/qrels.dl{year}-passage.txt")
            ),
            Remote(topics, github(*ANSERINI_TOOLS, f"topics/{topics}")),
        ]
    return Source("trec_dl", "trec_dl", ("dl19", "dl20"), tuple(remotes))


def _bright() -> list[Source]:
    topics = Source(
        "bright",
        "bright",
        tuple(f"bright-{t}" for t in BRIGHT_TASKS),
        tuple(
            Remote(f, github(*ANSERINI_TOOLS, f"{kind}/{f}"))
            for t in BRIGHT_TASKS
            for kind, f in (
                ("topics", f"topics.bright-{t}-original.jsonl.gz"),
                ("qrels", f"qrels.bright-{t}.txt"),
            )
        ),
    )
    documents = [
        Source(
            f"bright-{t}-documents",
            "bright",
            (f"bright-{t}",),
            (
                Remote(
                    f"documents/{bright_documents_file(t)}",
                    f"{BRIGHT_HUB}/documents/{bright_documents_file(t)}",
                ),
            ),
            default=False,
        )
        for t in BRIGHT_TASKS
    ]
    return [topics, *documents]


def _flat(
    name: str,
    folder: str,
    benchmarks: tuple[str, ...],
    repo: tuple[str, str],
    prefix: str,
    files: tuple[str, ...],
    **kwargs,
) -> Source:
    """A source whose files all sit in one folder of one repository."""
    return Source(
        name, folder, benchmarks, tuple(Remote(f, github(*repo, prefix + f)) for f in files), **kwargs
    )


def export_base64_images(folder: Path) -> int:
    """Write ``images/<id>.jpg`` from Chinese-CLIP's ``<split>_imgs.tsv`` (``id<TAB>base64``) files.

    A marker file records completion, so a second ``prepare`` does not re-read the 2 GB of TSV.
    """
    out, marker = folder / "images", folder / ".images.exported"
    if marker.exists():
        return 0
    out.mkdir(exist_ok=True)
    written = 0
    for tsv in sorted(folder.glob("*_imgs.tsv")):
        with open(tsv, encoding="utf-8") as f:
            for line in f:
                image_id, _, data = line.rstrip("\n").partition("\t")
                target = out / f"{image_id}.jpg"
                if data and not target.exists():
                    target.write_bytes(base64.b64decode(data))
                    written += 1
    marker.write_text(f"{written}\n")
    return written


SOURCES: tuple[Source, ...] = (
    _trec_dl(),
    *_bright(),
    _flat(
        "musique",
        "musique",
        ("musique",),
        HIPPORAG,
        "data/",
        ("musique_train.json", "musique_train_corpus.json"),
    ),
    _flat(
        "hotpotqa",
        "hotpotqa",
        ("hotpotqa",),
        HIPPORAG,
        "data/",
        ("hotpotqa_train.json", "hotpotqa_train_corpus.json"),
    ),
    # The full releases, for profile=paper (F-GRPO trains on 10,000 questions and evaluates on samples of
    # the validation sets: conf/benchmark/{musique,hotpotqa}.yaml `paper_options`). Named by no benchmark,
    # so only `--only musique-full hotpotqa-full` fetches them: `--only musique` stays the CPU rows' subset.
    Source(
        "musique-full",
        "musique",
        (),
        (
            Remote(
                "musique_v1.0.zip",
                MUSIQUE_V1_ZIP,
                unpack=True,
                members=("musique_ans_v1.0_train.jsonl", "musique_ans_v1.0_dev.jsonl"),
                flatten=True,
            ),
        ),
        default=False,
    ),
    Source(
        "hotpotqa-full",
        "hotpotqa",
        (),
        tuple(Remote(f, f"{HOTPOTQA_RELEASE}/{f}", sha256=h) for f, h in HOTPOTQA_FILES.items()),
        default=False,
    ),
    _flat(
        "movielens-100k",
        "movielens-100k",
        ("movielens-100k",),
        ("rat-nick/recsys", "52f78cd2a2371be10d69062e24e52a39b700ddff"),
        "data/ml-100k/",
        ("u.data", "u.item", "u.user"),
    ),
    _flat(
        "lastfm-hetrec2011",
        "lastfm-hetrec2011",
        ("lastfm",),
        ("DarakhTech/lastfm-dataset", "bee00fcda694e80855c878307ac0e27881d31fd5"),
        "hetrec2011-lastfm-2k/",
        ("artists.dat", "tags.dat", "user_artists.dat", "user_friends.dat", "readme.txt"),
    ),
    # The tag assignments (artist documents with tags) and their times (the order profile=paper gives a
    # user's artists: rankrl.data.recsys) exist only in the GroupLens release.
    Source(
        "lastfm-tags",
        "lastfm-hetrec2011",
        ("lastfm",),
        (
            Remote(
                "hetrec2011-lastfm-2k.zip",
                "https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip",
                unpack=True,
                members=("user_taggedartists.dat", "user_taggedartists-timestamps.dat"),
                optional=True,
                flatten=True,
            ),
        ),
        default=False,
    ),
    _flat(
        "coco-cn",
        "coco-cn",
        ("coco-cn",),
        ("li-xirong/coco-cn", "ef5cdd849439664f97c8ebb0621a65b1b4b89420"),
        "data/",
        ("coco-cn-version1805.tar.gz",),
        note="COCO-CN images are MS-COCO 2014: images.cocodataset.org/zips/{train,val}2014.zip"
        " -> coco-cn/images/",
    ),
    Source(
        "cirr",
        "cirr",
        ("cirr",),
        (
            *(Remote(f, github(*CIRR, f"captions/{f}")) for f in ("cap.rc2.val.json", "cap.rc2.test1.json")),
            Remote("cap.rc2.train.json", github(*CIRR, "captions/cap.rc2.train.json"), optional=True),
            Remote("cap.ext.rc2.val.json", github(*CIRR, "captions_ext/cap.ext.rc2.val.json")),
            *(
                Remote(f"split.rc2.{s}.json", github(*CIRR, f"image_splits/split.rc2.{s}.json"))
                for s in ("train", "val", "test1")
            ),
        ),
        note="CIRR images (NLVR2) are distributed by the CIRR authors: github.com/Cuberick-Orion/CIRR"
        " -> cirr/images/",
    ),
    _flat(
        "wands",
        "wands",
        ("wands",),
        ("wayfair/WANDS", "3b74dcf4ba29ab8ff3e6a50b5b09fc627cb882b5"),
        "dataset/",
        ("query.csv", "product.csv", "label.csv"),
    ),
    Source(
        "msmarco",
        "msmarco",
        ("msmarco-train",),
        (
            Remote(
                "train.jsonl.gz",
                "https://huggingface.co/datasets/Tevatron/msmarco-passage/resolve/main/train.jsonl.gz",
            ),
        ),
        default=False,
    ),
    Source(
        "flickr30k-cn",
        "flickr30k-cn",
        ("flickr30k-cn",),
        (
            Remote(
                "Flickr30k-CN.zip",
                "https://clip-cn-beijing.oss-cn-beijing.aliyuncs.com/datasets/Flickr30k-CN.zip",
                unpack=True,
            ),
        ),
        default=False,
    ),
    Source(
        "cvlue",
        "cvlue",
        ("cvlue",),
        (
            Remote(
                "IC_train.json",
                github(
                    "WangYuxuan93/CVLUE",
                    "b8c7b29c16d77303a0c817b83e92c521d04f3dad",
                    "preprocess/IC/IC_train.json",
                ),
            ),
            Remote(
                "IC_val.json",
                github(
                    "WangYuxuan93/CVLUE",
                    "ffbd99adad5a89af1cf4a79be7f297b10fd8c4f9",
                    "preprocess/IC/IC_val.json",
                ),
            ),
            Remote(
                "IC_test.json",
                github(
                    "WangYuxuan93/CVLUE",
                    "b8c7b29c16d77303a0c817b83e92c521d04f3dad",
                    "preprocess/IC/IC_test.json",
                ),
            ),
        ),
        default=False,
        note="CVLUE images are granted on request (github.com/WangYuxuan93/CVLUE) -> cvlue/images/",
    ),
    Source(
        "xm3600",
        "xm3600",
        ("xm3600",),
        (
            Remote(
                "captions.zip", "https://google.github.io/crossmodal-3600/web-data/captions.zip", unpack=True
            ),
            Remote(
                "images.tgz",
                "https://open-images-dataset.s3.amazonaws.com/crossmodal-3600/images.tgz",
                unpack=True,
                into="images",
            ),
        ),
        default=False,
    ),
    Source(
        "wiki-image",
        "wiki-image",
        ("wiki-image",),
        (
            Remote(
                "wit_v1.val.all-00000-of-00005.tsv.gz",
                "https://storage.googleapis.com/gresearch/wit/wit_v1.val.all-00000-of-00005.tsv.gz",
            ),
        ),
        default=False,
        note="WIT lists image URLs only: fetch each query's extra['image_url'] to its extra['image_path']",
    ),
)

# Steps after download, by source name: they turn what was downloaded into what the loader reads.
POST_STEPS = {"flickr30k-cn": export_base64_images}

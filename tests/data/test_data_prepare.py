"""prepare(): copies from the shared copy, downloads (file:// URLs, never the network), is idempotent."""

from __future__ import annotations

import base64
import hashlib
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import rankrl.data.prepare as prep
from rankrl.data import BENCHMARKS, load_benchmark
from rankrl.data.sources import SOURCES, Remote, Source, export_base64_images
from tests.conftest import require_data

# What ../shared/data (the copy on the build machines) lacks of the default sources: see its README.md.
SHARED_COPY_LACKS = {"wands": {"product.csv", "label.csv"}}


def _shared_copy_files() -> list[str]:
    """The files of ../shared/data that `make data` copies: the default sources' required files."""
    return [
        f"{s.folder}/{r.name}"
        for s in SOURCES
        if s.default
        for r in s.remotes
        if not r.optional and r.name not in SHARED_COPY_LACKS.get(s.folder, ())
    ]


@pytest.fixture(scope="module")
def shared_copy(tmp_path_factory) -> Path:
    """A read-only folder laid out as ../shared/data, rebuilt from the folder `make data` prepared.

    ../shared/data exists only on the build machines, but `make data` leaves its files (copied, else
    downloaded under the same names) in the data folder everywhere, so these tests run on every machine.
    """
    data_dir = require_data(*_shared_copy_files())
    root = tmp_path_factory.mktemp("shared") / "data"
    for name in _shared_copy_files():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_dir / name, dest)
        dest.chmod(0o444)  # as on the build machines, where the shared copy is read-only
    return root


def _no_network(url: str, dest: Path) -> None:
    raise AssertionError(f"tests must not download ({url})")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Let the downloader read only file:// URLs; returns the other URLs it was asked for."""
    attempted: list[str] = []
    real_fetch = prep.fetch_url

    def local_only(url: str, dest: Path) -> None:
        if url.startswith("file://"):
            return real_fetch(url, dest)
        attempted.append(url)
        raise ConnectionError(f"tests must not download ({url})")

    monkeypatch.setattr(prep, "fetch_url", local_only)
    return attempted


def test_copies_the_shared_folders_and_is_idempotent(tmp_path, shared_copy, offline):
    lines = prep.prepare(tmp_path, shared_copy, ["dl19", "musique"], fetch=_no_network)
    assert lines == [
        f"trec_dl: copied 8 files from {shared_copy / 'trec_dl'}",
        f"musique: copied 2 files from {shared_copy / 'musique'}",
    ]
    for name in ("trec_dl/qrels.dl19-passage.txt", "musique/musique_train.json"):
        copy, original = tmp_path / name, shared_copy / name
        assert copy.read_bytes() == original.read_bytes()
        assert not copy.is_symlink() and copy.stat().st_mode & stat.S_IWUSR  # a real, writable copy
    assert len(load_benchmark("dl19", tmp_path).queries) == 43
    again = prep.prepare(tmp_path, shared_copy, ["dl19", "musique"], fetch=_no_network)
    assert again == ["trec_dl: skipped 8 files already copied", "musique: skipped 2 files already copied"]
    assert offline == []


def test_a_file_of_the_wrong_size_is_copied_again(tmp_path, shared_copy):
    prep.prepare(tmp_path, shared_copy, ["hotpotqa"], fetch=_no_network)
    (tmp_path / "hotpotqa" / "hotpotqa_train.json").write_text("[]")
    (line,) = prep.prepare(tmp_path, shared_copy, ["hotpotqa"], fetch=_no_network)
    assert line.startswith("hotpotqa: copied 1 files")
    assert len(load_benchmark("hotpotqa", tmp_path).queries) == 100


def test_default_run_copies_and_reports_what_the_shared_copy_lacks(tmp_path, shared_copy, capsys):
    lines = prep.prepare(tmp_path, shared_copy, fetch=_no_network)
    assert [line.split(":")[0] for line in lines] == [s.name for s in SOURCES if s.default]
    wands = next(line for line in lines if line.startswith("wands"))
    assert "not in the shared copy: product.csv, label.csv" in wands and "--only wands" in wands
    assert capsys.readouterr().out.splitlines() == lines


def _file_source(tmp_path: Path, names: list[str], **remote) -> Source:
    origin = tmp_path / "origin"
    origin.mkdir(exist_ok=True)
    remotes = []
    for name in names:
        (origin / name).write_text(f"contents of {name}\n")
        remotes.append(Remote(name, (origin / name).as_uri(), **remote))
    return Source("toy", "toy", ("toy-bench",), tuple(remotes))


def test_downloads_when_there_is_no_shared_copy(tmp_path):
    source = _file_source(tmp_path, ["a.txt", "b.txt"])
    data = tmp_path / "data"
    lines = prep.prepare(data, None, ["toy-bench"], sources=[source])
    assert lines == ["toy: downloaded a.txt, b.txt"]
    assert (data / "toy" / "b.txt").read_text() == "contents of b.txt\n"
    assert prep.prepare(data, None, ["toy"], sources=[source]) == ["toy: skipped 2 files already present"]


def test_shared_copy_plus_download_of_what_it_lacks_when_asked(tmp_path):
    source = _file_source(tmp_path, ["a.txt", "b.txt"])
    shared = tmp_path / "shared"
    (shared / "toy").mkdir(parents=True)
    (shared / "toy" / "a.txt").write_text("shared a\n")
    (line,) = prep.prepare(tmp_path / "data", shared, ["toy"], sources=[source])
    assert line == f"toy: copied 1 files from {shared / 'toy'}; downloaded b.txt"
    assert (tmp_path / "data" / "toy" / "a.txt").read_text() == "shared a\n"


def test_a_killed_download_leaves_nothing(tmp_path, monkeypatch):
    source = _file_source(tmp_path, ["big.bin"])

    def interrupted(src, dst, length=0):
        dst.write(b"half of it")
        raise KeyboardInterrupt

    monkeypatch.setattr(prep.shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prep.prepare(tmp_path / "data", None, ["toy"], sources=[source])
    assert list((tmp_path / "data" / "toy").iterdir()) == []


def test_a_failed_download_is_reported_and_fails_the_run(tmp_path):
    source = _file_source(tmp_path, ["a.txt"])
    broken = Source("gone", "gone", (), (Remote("x.txt", (tmp_path / "nowhere.txt").as_uri()),))
    optional = Source(
        "extra", "extra", (), (Remote("y.txt", (tmp_path / "nowhere.txt").as_uri(), optional=True),)
    )
    with pytest.raises(RuntimeError, match="could not prepare gone"):
        prep.prepare(tmp_path / "data", None, ["toy", "gone", "extra"], sources=[source, broken, optional])
    assert (tmp_path / "data" / "toy" / "a.txt").exists()
    assert not (tmp_path / "data" / "gone").exists() or not list((tmp_path / "data" / "gone").iterdir())


def test_archives_are_unpacked_once_without_their_top_folder(tmp_path):
    archive = tmp_path / "origin" / "set.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("Set/train_texts.jsonl", "{}\n")
        zf.writestr("Set/sub/x.txt", "x")
        zf.writestr("__MACOSX/Set/._x.txt", "junk")
    source = Source("toy", "toy", (), (Remote("set.zip", archive.as_uri(), unpack=True),))
    data = tmp_path / "data"
    prep.prepare(data, None, ["toy"], sources=[source])
    assert (data / "toy" / "train_texts.jsonl").read_text() == "{}\n"
    assert (data / "toy" / "sub" / "x.txt").exists() and not (data / "toy" / "__MACOSX").exists()
    (data / "toy" / "set.zip").unlink()  # the unpack marker is enough to skip it next time
    assert prep.prepare(data, None, ["toy"], sources=[source]) == ["toy: skipped 1 files already present"]


def test_flattened_members_land_at_the_top_and_a_member_added_later_is_unpacked(tmp_path):
    """MuSiQue's release zip (musique-full) as its layout might be: members in nested folders are written
    at the folder's top, where the loader reads them; a member named later comes out of the same zip."""
    archive = tmp_path / "origin" / "release.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("release_v1/data/a_train.jsonl", "{}\n")
        zf.writestr("release_v1/data/a_dev.jsonl", "[]\n")
        zf.writestr("release_v1/other.txt", "x")
    data = tmp_path / "data"

    def source(*members: str) -> Source:
        remote = Remote("release.zip", archive.as_uri(), unpack=True, members=members, flatten=True)
        return Source("toy", "toy", (), (remote,))

    prep.prepare(data, None, ["toy"], sources=[source("a_train.jsonl")])
    assert sorted(p.name for p in (data / "toy").iterdir() if not p.name.startswith(".")) == [
        "a_train.jsonl",
        "release.zip",
    ]
    prep.prepare(data, None, ["toy"], sources=[source("a_train.jsonl", "a_dev.jsonl")])
    assert (data / "toy" / "a_dev.jsonl").read_text() == "[]\n"
    assert not (data / "toy" / "other.txt").exists()


def test_a_download_whose_sha256_differs_is_deleted_and_fails(tmp_path):
    origin = tmp_path / "origin" / "file.json"
    origin.parent.mkdir()
    origin.write_text("[]")
    good = hashlib.sha256(b"[]").hexdigest()
    data = tmp_path / "data"
    bad = Source("toy", "toy", (), (Remote("file.json", origin.as_uri(), sha256="0" * 64),))
    with pytest.raises(RuntimeError, match="could not prepare toy"):
        prep.prepare(data, None, ["toy"], sources=[bad])
    assert not (data / "toy" / "file.json").exists()
    ok = Source("toy", "toy", (), (Remote("file.json", origin.as_uri(), sha256=good),))
    prep.prepare(data, None, ["toy"], sources=[ok])
    assert (data / "toy" / "file.json").read_text() == "[]"


def test_unknown_only_name_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="dl19"):
        prep.prepare(tmp_path, None, ["dl2019"])


def test_main_command_line(tmp_path, shared_copy, capsys, offline):
    args = ["--data-dir", str(tmp_path), "--shared-dir", str(shared_copy), "--only"]
    assert prep.main([*args, "lastfm-hetrec2011"]) == 0
    assert capsys.readouterr().out.startswith("lastfm-hetrec2011: copied 5 files")
    assert offline == []
    # By benchmark name, lastfm also asks for the optional tag file: offline that is a warning only.
    assert prep.main([*args, "lastfm"]) == 0
    assert "WARNING hetrec2011-lastfm-2k.zip" in capsys.readouterr().out
    assert offline == ["https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip"]
    assert prep.main([*args, "wands"]) == 1  # product.csv and label.csv cannot be fetched offline
    assert "could not prepare wands" in capsys.readouterr().err
    assert prep.main(["--data-dir", str(tmp_path), "--only", "nonsense"]) == 1
    assert "unknown data source" in capsys.readouterr().err


def test_every_benchmark_has_a_source_and_make_data_filled_the_default_ones(data_dir):
    covered = {b for s in SOURCES for b in s.benchmarks}
    assert set(BENCHMARKS) <= covered
    for source in SOURCES:  # every origin is an https URL, or pinned by its SHA-256 (HotpotQA's http server)
        assert all(r.url.startswith("https://") or r.sha256 for r in source.remotes), source.name
    # A plain `make data` (the shared copy where there is one, else downloads) left every required file.
    missing = [name for name in _shared_copy_files() if not (data_dir / name).is_file()]
    assert missing == [], f"run `make data`: {missing}"


def test_python_dash_m_copies_and_reports_through_its_exit_status(tmp_path, shared_copy):
    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "rankrl.data.prepare", "--data-dir", str(tmp_path / "data"), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    done = run("--shared-dir", str(shared_copy), "--only", "dl19")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"trec_dl: copied 8 files from {shared_copy / 'trec_dl'}\n"
    copied = sorted(p.name for p in (tmp_path / "data" / "trec_dl").iterdir())
    assert copied == sorted(p.name for p in (shared_copy / "trec_dl").iterdir()) and len(copied) == 8
    assert (tmp_path / "data" / "trec_dl" / "qrels.dl19-passage.txt").read_bytes() == (
        shared_copy / "trec_dl" / "qrels.dl19-passage.txt"
    ).read_bytes()
    failed = run("--shared-dir", "none", "--only", "nonsense")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("error: unknown data source or benchmark ['nonsense']")


def test_tar_archives_unpack_into_a_subfolder_and_by_member(tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    for name in ("0001.jpg", "0002.jpg", "notes.txt"):
        (origin / name).write_bytes(name.encode())
    with tarfile.open(origin / "images.tgz", "w:gz") as tar:
        for name in ("0001.jpg", "0002.jpg"):
            tar.add(origin / name, arcname=f"./{name}")
    with tarfile.open(origin / "mixed.tar.gz", "w:gz") as tar:
        tar.add(origin / "notes.txt", arcname="release/notes.txt")
        tar.add(origin / "0001.jpg", arcname="release/0001.jpg")
    source = Source(
        "toy",
        "toy",
        (),
        (
            Remote("images.tgz", (origin / "images.tgz").as_uri(), unpack=True, into="images"),
            Remote("mixed.tar.gz", (origin / "mixed.tar.gz").as_uri(), unpack=True, members=("notes.txt",)),
        ),
    )
    prep.prepare(tmp_path / "data", None, ["toy"], sources=[source])
    folder = tmp_path / "data" / "toy"
    assert sorted(p.name for p in (folder / "images").iterdir()) == ["0001.jpg", "0002.jpg"]
    assert (folder / "notes.txt").read_bytes() == b"notes.txt" and not (folder / "0001.jpg").exists()


def test_flickr30k_cn_base64_images_are_exported_once(tmp_path):
    folder = tmp_path / "flickr30k-cn"
    folder.mkdir()
    jpeg = b"\xff\xd8\xff\xe0 not really a jpeg"
    (folder / "valid_imgs.tsv").write_text(f"1000092795\t{base64.b64encode(jpeg).decode()}\n")
    assert export_base64_images(folder) == 1
    assert (folder / "images" / "1000092795.jpg").read_bytes() == jpeg
    assert export_base64_images(folder) == 0  # the marker skips the second pass

"""prepare(): copies from the shared copy, downloads (file:// URLs, never the network), is idempotent."""

from __future__ import annotations

import base64
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

import rankrl.data.prepare as prep
from rankrl.data import BENCHMARKS, load_benchmark
from rankrl.data.sources import SOURCES, Remote, Source, export_base64_images


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


def test_copies_the_shared_folders_and_is_idempotent(tmp_path, shared_data, offline):
    lines = prep.prepare(tmp_path, shared_data, ["dl19", "musique"], fetch=_no_network)
    assert lines == [
        f"trec_dl: copied 8 files from {shared_data / 'trec_dl'}",
        f"musique: copied 2 files from {shared_data / 'musique'}",
    ]
    for name in ("trec_dl/qrels.dl19-passage.txt", "musique/musique_train.json"):
        copy, original = tmp_path / name, shared_data / name
        assert copy.read_bytes() == original.read_bytes()
        assert not copy.is_symlink() and copy.stat().st_mode & stat.S_IWUSR  # a real, writable copy
    assert len(load_benchmark("dl19", tmp_path).queries) == 43
    again = prep.prepare(tmp_path, shared_data, ["dl19", "musique"], fetch=_no_network)
    assert again == ["trec_dl: skipped 8 files already copied", "musique: skipped 2 files already copied"]
    assert offline == []


def test_a_file_of_the_wrong_size_is_copied_again(tmp_path, shared_data):
    prep.prepare(tmp_path, shared_data, ["hotpotqa"], fetch=_no_network)
    (tmp_path / "hotpotqa" / "hotpotqa_train.json").write_text("[]")
    (line,) = prep.prepare(tmp_path, shared_data, ["hotpotqa"], fetch=_no_network)
    assert line.startswith("hotpotqa: copied 1 files")
    assert len(load_benchmark("hotpotqa", tmp_path).queries) == 100


def test_default_run_copies_and_reports_what_the_shared_copy_lacks(tmp_path, shared_data, capsys):
    lines = prep.prepare(tmp_path, shared_data, fetch=_no_network)
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


def test_unknown_only_name_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="dl19"):
        prep.prepare(tmp_path, None, ["dl2019"])


def test_main_command_line(tmp_path, shared_data, capsys, offline):
    args = ["--data-dir", str(tmp_path), "--shared-dir", str(shared_data), "--only"]
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


def test_every_benchmark_has_a_source_and_shared_folders_match(shared_data):
    covered = {b for s in SOURCES for b in s.benchmarks}
    assert set(BENCHMARKS) <= covered
    shared_folders = {p.name for p in shared_data.iterdir() if p.is_dir()}
    assert shared_folders == {s.folder for s in SOURCES if s.default}
    for source in SOURCES:  # every pinned origin is an https URL
        assert all(r.url.startswith("https://") for r in source.remotes), source.name
    for source in (s for s in SOURCES if s.folder in shared_folders):
        shared_files = {
            str(p.relative_to(shared_data / source.folder)) for p in (shared_data / source.folder).rglob("*")
        }
        if source.default:  # what a download fetches has the shared copy's file names
            required = {r.name for r in source.remotes if not r.optional}
            assert required <= shared_files | {"product.csv", "label.csv"}, source.name


def test_python_dash_m_entry_point_exists():
    assert os.path.isfile(prep.__file__) and callable(prep.main)


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

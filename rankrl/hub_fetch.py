"""Weights a paper-scale run loads by hub name, fetched once before its rows run.

Every run is offline (``rankrl.config`` sets ``HF_HUB_OFFLINE=1``): a hub name loads from the local cache or
fails at once, so a run never hangs on the network and never fetches half way through a table. A paper's
script (``experiments/<paper>/reproduce.sh`` at ``PROFILE=paper``) therefore fetches what its rows will load
first, through this module, the one step that goes online:

    python -m rankrl.hub_fetch model/qwen2.5-7b retriever/clip-vit-b16 retriever/splade-v2 \
        hub/Salesforce/blip2-opt-2.7b

A spec names a config file (``model/<name>``: its ``path``; ``retriever/<name>``: its ``model_path``, or its
open_clip ``arch`` and ``pretrained`` tag) or a hub repository (``hub/<owner>/<name>``). Weights already in
the cache are not fetched again. ``--list`` prints what each spec resolves to, without the network.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from rankrl.config import CONFIG_DIR
from rankrl.errors import ConfigError


@dataclass(frozen=True)
class Weights:
    """One thing to fetch: a Hugging Face hub repository, or open_clip weights (``arch`` + ``tag``)."""

    repo: str | None = None
    arch: str | None = None
    tag: str | None = None

    def describe(self) -> str:
        return f"hub {self.repo}" if self.repo else f"open_clip {self.arch} ({self.tag})"


def resolve(spec: str) -> Weights | None:
    """What ``spec`` loads from a hub; None where it loads nothing (a local folder, random weights)."""
    kind, _, name = spec.partition("/")
    if kind == "hub" and name:
        return Weights(repo=name)
    if kind not in ("model", "retriever") or not name:
        raise ConfigError(f"{spec!r}: a spec is model/<name>, retriever/<name> or hub/<owner>/<name>")
    file = CONFIG_DIR / kind / f"{name}.yaml"
    if not file.is_file():
        choices = sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))
        raise ConfigError(f"{spec!r}: no conf/{kind}/{name}.yaml; {kind} choices: {', '.join(choices)}")
    node = group_file(file)
    location = node.get("path") if kind == "model" else node.get("model_path")
    if isinstance(location, str) and "${" not in location and not location.startswith(("/", ".")):
        return Weights(repo=location)  # a hub name, not a folder under the cache
    if kind == "retriever" and node.get("pretrained") and node.get("arch"):
        return Weights(arch=str(node["arch"]), tag=str(node["pretrained"]))
    return None


def group_file(file: Path) -> dict:
    """A config group file's keys as written (interpolations unresolved), over the files of its group that
    its ``defaults`` list first (``clip-vit-l14`` extends ``clip-vit-b16``)."""
    node = OmegaConf.to_container(OmegaConf.load(file), resolve=False)
    merged: dict = {}
    for entry in node.pop("defaults", []):
        if isinstance(entry, str) and entry != "_self_":
            merged.update(group_file(file.parent / f"{entry}.yaml"))
    return {**merged, **node}


def open_clip_dir() -> Path:
    """Where the clip retrievers look for open_clip weights (conf/retriever/clip-*.yaml: weights_dir)."""
    from rankrl.models import default_cache_dir

    return default_cache_dir() / "open_clip"


def fetch(weights: Weights) -> str:
    """Fetch ``weights`` into the cache the runs read; returns where they are."""
    if weights.repo:
        from huggingface_hub import snapshot_download

        return snapshot_download(weights.repo)
    import open_clip

    open_clip.create_model_and_transforms(
        weights.arch, pretrained=weights.tag, cache_dir=str(open_clip_dir())
    )
    return str(open_clip_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rankrl.hub_fetch", description=__doc__.split("\n")[0])
    parser.add_argument("specs", nargs="+", help="model/<name>, retriever/<name> or hub/<owner>/<name>")
    parser.add_argument("--list", action="store_true", help="print what each spec loads; fetch nothing")
    args = parser.parse_args(argv)
    try:
        wanted = {spec: resolve(spec) for spec in args.specs}
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # this step alone goes online (set before huggingface_hub reads it at import)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[key] = "0"
    for spec, weights in wanted.items():
        if weights is None:
            print(f"{spec}: nothing to fetch (local or random weights)")
        elif args.list:
            print(f"{spec}: {weights.describe()}")
        else:
            print(f"{spec}: {weights.describe()} -> {fetch(weights)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``retriever`` config group's choice as one thing every task calls: ``build(docs, cache_dir=, name=)``.

A choice reaches a task in one of several shapes: its plain config node (a task whose config is not
recursive), the ``functools.partial`` Hydra makes of it (``_partial_: true``), a class or a function (tests,
Python callers), or the ``none`` choice's node ``{name: none}``. ``retriever_builder`` turns each into a
``RetrieverBuilder``, or None for ``none``, so no task inspects config nodes or signatures itself.

Two keywords differ from retriever to retriever: ``cache_dir`` (where indexes and vectors are cached) and
``name`` (pyserini's index-folder prefix). The builder passes each only to a constructor that takes it, and
drops the config's ``name`` key: it labels the config choice (run folders, ``${retriever.name}``), not the
index (PyseriniBM25's own default name is ``bm25`` as well).

Nothing heavy is imported here: the retriever's module (a JVM, torch) loads when its node is resolved.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankrl.errors import ConfigError

LABEL = "name"  # the key of a conf/retriever node that names the choice
BUILD_KEYWORDS = ("cache_dir", "name")  # passed only where the retriever's constructor takes them


@dataclass(frozen=True)
class RetrieverBuilder:
    """A retriever's constructor with its configured options, called as ``build(docs, cache_dir=, name=)``.

    Args:
        factory: the retriever's class, or any callable returning a retriever.
        options: its configured keyword arguments (``k1``, ``b``, ``arch`` ...), the choice's label left out.
    """

    factory: Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(
        self, docs: Sequence[Any] | None = None, *, cache_dir: Any = None, name: str | None = None
    ) -> Any:
        """The retriever, over ``docs`` when given. ``cache_dir`` and ``name`` override a configured value
        of the same key when not None, and reach the constructor only where it takes them."""
        given = {k: v for k, v in {"cache_dir": cache_dir, "name": name}.items() if v is not None}
        kwargs = {**self.options, **{k: v for k, v in given.items() if takes_keyword(self.factory, k)}}
        return self.factory(**kwargs) if docs is None else self.factory(docs, **kwargs)


def takes_keyword(factory: Callable[..., Any], keyword: str) -> bool:
    """Whether ``factory`` accepts ``keyword`` (by name or through ``**kwargs``); a callable whose signature
    cannot be read takes none, so an unknown keyword never breaks the call."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    if keyword in params and params[keyword].kind is not inspect.Parameter.POSITIONAL_ONLY:
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def retriever_choices() -> list[str]:
    """The ``retriever`` group's options that build a retriever (``conf/retriever/*.yaml`` but ``none``)."""
    from rankrl.config import group_choices  # composes nothing; imported here to keep this module light

    return [c for c in group_choices("retriever") if c != "none"]


def bad_retriever(node: Any, why: str = "") -> ConfigError:
    """The error of a node no retriever can be built from, naming the valid choices."""
    reason = f": {why}" if why else ""
    return ConfigError(
        f"cannot build a retriever from {node!r}{reason}; choose retriever={'|'.join(retriever_choices())}"
    )


def from_partial(partial: functools.partial) -> RetrieverBuilder:
    """A partial's function and keywords, its ``name`` keyword dropped: Hydra puts every key of the node into
    the partial, the choice's label included."""
    factory = functools.partial(partial.func, *partial.args) if partial.args else partial.func
    options = {k: v for k, v in partial.keywords.items() if k != LABEL}
    return RetrieverBuilder(factory, options)


def from_node(node: Mapping[str, Any]) -> RetrieverBuilder:
    """A config node with ``_target_``, resolved as a partial (``_partial_`` forced, so even a node without
    it gets ``docs`` and ``cache_dir`` at build time) into plain Python values."""
    from hydra.errors import HydraException
    from hydra.utils import instantiate

    spec = {k: v for k, v in node.items() if k != LABEL}
    spec["_partial_"] = True
    try:
        partial = instantiate(spec, _convert_="all")
    except (HydraException, ImportError, AttributeError, ValueError) as err:
        why = str(err).splitlines()[0].split(", set env var HYDRA_FULL_ERROR")[0]  # Hydra's own hint: noise
        raise bad_retriever(node.get("_target_"), why) from err
    if not isinstance(partial, functools.partial):  # a nested _partial_: false, or a custom _target_ type
        raise bad_retriever(node.get("_target_"), "its node does not resolve to a constructor")
    return from_partial(partial)


def is_built_retriever(retriever: Any) -> bool:
    """Whether ``retriever`` is a vector retriever already built (``vector_index`` and ``encode_queries``),
    not a config choice to build one from (a node, a partial, a class: a class has the methods too)."""
    return (
        not isinstance(retriever, (type, Mapping))
        and hasattr(retriever, "vector_index")
        and hasattr(retriever, "encode_queries")
    )


def retriever_builder(node: Any) -> RetrieverBuilder | None:
    """The ``retriever`` group's choice as a ``RetrieverBuilder``; None for no retriever.

    Accepts None or the ``none`` choice (a node without ``_target_``) -> None; a config node with
    ``_target_`` (Mapping or DictConfig); the ``functools.partial`` Hydra makes of it; a class or another
    callable; a ``RetrieverBuilder`` (returned as it is). Anything else raises ``ConfigError`` naming the
    valid choices.
    """
    if node is None or isinstance(node, RetrieverBuilder):
        return node
    if isinstance(node, Mapping):
        return from_node(node) if "_target_" in node else None
    if isinstance(node, functools.partial):
        return from_partial(node)
    if callable(node):
        return RetrieverBuilder(node)
    raise bad_retriever(node)

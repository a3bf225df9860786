"""Tasks implement the contract declared in ``rankrl.rl.task``; re-exported here for task modules."""

from rankrl.rl.task import (  # noqa: F401
    DEFAULT_ROLE,
    EvalTask,
    Example,
    Scores,
    SFTExample,
    Span,
    TaskBase,
    TrainTask,
)

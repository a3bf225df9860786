"""Errors a user can fix: entry points print them as one line (``rankrl.cli``), never as a traceback."""


class UserError(Exception):
    """A problem in the config or the environment, not in rankrl."""


class ConfigError(UserError, ValueError):
    """A config value that cannot work; the message names the key and what would."""


class EnvironmentProblem(UserError, RuntimeError):
    """Something this machine lacks (a package, a GPU, a model's weights) for what the config asks."""

"""rankrl: GRPO training of LLMs against frozen retrieval systems.

The package follows the data flow: data -> retrieval -> rollout -> rl -> eval -> report.
Paper-specific methods live in `rankrl.tasks`; nothing else imports a task.
"""

__version__ = "0.1.0"

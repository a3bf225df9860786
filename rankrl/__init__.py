"""rankrl: GRPO training of LLMs against frozen retrieval systems.

The package follows the data flow: data -> retrieval -> rollout -> rl -> eval -> report.
Paper-specific methods live in `rankrl.tasks`; nothing else imports a task.
"""

import os

# Same seed, same CPU metrics: without MKL's conditional numerical reproducibility mode, identical runs may
# differ in the last bits (MKL picks code paths at run time, e.g. by memory alignment), and a kill-and-resume
# test once saw a different step-1 gradient norm. AUTO keeps the fastest branch for this CPU; measured at no
# cost on a SmolLM2-135M forward/backward. Set before torch's first BLAS call; the user's own values win.
os.environ.setdefault("MKL_CBWR", "AUTO")
os.environ.setdefault("MKL_DYNAMIC", "FALSE")

__version__ = "0.1.0"

"""Each task's part of the data stages (prepare_data, pretrain, filter_hard, seed_prefixes,
evaluate), which its Task inherits (``components.trainer.task``).

``prepare_data``, ``pretrain``, ``filter_hard`` and ``seed_prefixes`` (``(params, ctx)``) write
the stage's outputs; ``evaluation(params, ctx)`` gives the sampler, the held-out items as (uid, item) and the samples
per item and sampling seed, whose ``eval_samples``, ``majority``, ``eval_fields``,
``EVAL_RECORDS`` and ``close`` the evaluate stage uses. Named here, apart from the tasks'
table (``components.trainer.task.TASKS``), so that only these stages' code fingerprints
take in these parts, and none of them the trainer.
"""
from __future__ import annotations

import importlib

DATA_STAGES = {"math": "components.data.task_stages:ProblemStages",
               "agentic": "components.agentic.data_stages:EpisodeStages"}


def data_stages(task: str):
    """The class of ``task``'s data-stage part."""
    mod, _, attr = DATA_STAGES[task].partition(":")
    return getattr(importlib.import_module(mod), attr)

"""Agentic (multi-turn) tasks behind the same stages, methods, trainer and lineage as the math task.

``rollout``: episodes generated turn by turn for a batch; ``task``: the episodic ``Task``;
``data_stages``: its part of the data stages; ``bc``: the behaviour-cloned base policy;
``policy``: its tokenizer; ``trace``: TRACE, a method for episodes only.
"""

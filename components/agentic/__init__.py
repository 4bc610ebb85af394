"""Agentic (multi-turn) tasks behind the same stages, methods and lineage as the math task.

``rollout``: episodes generated turn by turn for a batch; ``methods``: what to roll out on
episodes (fresh groups, VSR over turn prefixes); ``trainer``: GiGPO updates on the turns;
``bc``: the behaviour-cloned base policy; ``stages``: the stage modules a sweep's
``task: agentic`` selects (``components.lineage``).
"""

"""Stage modules of agentic sweeps: the same stage names, inputs and outputs as
``components.stages``, selected by ``task: agentic`` in a stage's params
(``components.lineage.stage_module_path``)."""

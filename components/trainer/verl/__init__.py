"""The verl backend of the ``train`` stage (GPU, Ray, vLLM rollouts).

hydra_config.py  our train params -> verl's composed Hydra config
rollout.py  RolloutEngine over verl's generate_sequences (DataProto in/out)
agent_loop.py  the token-id agent loop verl's rollout workers run for it
dataproto.py  Groups -> DataProto, verl core_algos advantages with uid grouping
trainer.py  RayPPOTrainer subclass running the shared loop (components/trainer/loop.py)
run.py      one run (stage backend: verl; ``rlvr train-verl`` on the command line)
sft.py      SFT on verl's Ray SFT trainer (the embedded SFT's rows and batches)
cells.py    sweep-validation checks of verl cells (no verl form; per-GPU memory fit)
memory.py   per-GPU memory arithmetic of one cell (torch-free)
gpu_settings.py  rendered GPU knobs against verl's example scripts (``python -m``)
advantages.py    per-token advantages in the verl update: RL-ZVP (``register_adv_est``), OPD / PG-OPD

Nothing here is imported by the embedded path; importing this package imports nothing heavy.
"""

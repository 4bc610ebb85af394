"""Pipeline stages (one module each; contract in base.py). Modules import heavy
libraries inside ``run`` so that validating params (``rlvr sweep`` does it for every
stage before anything runs) stays light."""

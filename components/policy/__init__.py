"""The tiny policy of the embedded (CPU) demo, one module per part: ``tokenizer`` (one token
per character), ``model`` (a ~0.8M-parameter Qwen2: build, save, load) and ``pretraining``
(supervised pretraining on expert traces). Nothing is re-exported here: ``components.hf_models``
imports ``tokenizer`` alone, and ``model`` imports ``hf_models``.
"""

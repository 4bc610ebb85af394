"""The one tiny test policy the method and trainer tests share (1 layer, 32 wide, random
weights: mechanics, not accuracy). ``tests/conftest.py`` offers it as the ``tok`` and
``model`` fixtures; a test that needs its own instance calls :func:`tiny_test_policy`."""
from __future__ import annotations

TINY_TEST_POLICY = dict(layers=1, hidden=32, heads=2, kv_heads=2, ffn=64, max_positions=128)


def tiny_test_policy(tok, seed: int = 0):
    from components.policy.model import TinyPolicyConfig, build_policy

    return build_policy(TinyPolicyConfig(**TINY_TEST_POLICY), tok, seed=seed)

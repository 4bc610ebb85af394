"""Rollout engines. Import concrete engines lazily (``components.engine.hf``) — they pull torch."""
from components.engine.base import (Completion, PURPOSES, Request, RolloutEngine, SamplingParams,
                                    TokenMeter)

__all__ = ["Completion", "PURPOSES", "Request", "RolloutEngine", "SamplingParams", "TokenMeter"]

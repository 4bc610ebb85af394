"""Verifiable math reward (last ``\\boxed{}`` answer checked by math-verify in worker processes)."""
from components.reward.grader import REASONS, Grade, Grader, extract_boxed, grade_responses

__all__ = ["REASONS", "Grade", "Grader", "extract_boxed", "grade_responses"]

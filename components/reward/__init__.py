"""Verifiable math reward (the final ``\\boxed{}`` answer, or the run of boxes a response ends with,
checked by math-verify in worker processes)."""
from components.reward.grader import REASONS, Grade, Grader, extract_answer, extract_boxed, grade_responses

__all__ = ["REASONS", "Grade", "Grader", "extract_answer", "extract_boxed", "grade_responses"]

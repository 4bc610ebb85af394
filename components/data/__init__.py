from components.data.schema import DataError, Problem, read_problems, write_problems

__all__ = ["DataError", "Problem", "read_problems", "write_problems"]

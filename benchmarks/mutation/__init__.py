"""The machinery of `python -m benchmarks.mutation_check`: making mutants (`mutants`) and running tests
against them in a copy of the repository (`runner`). What is checked, and which survivors are
accepted, stays in `benchmarks/mutation_check.py` and `benchmarks/mutation_accepted.txt`."""

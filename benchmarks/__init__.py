"""Runnable benchmark scripts, each started from the repository root as
`python -m benchmarks.<name>` (`--help` lists its options). Library code lives in the packages."""

"""PyPTO benchmark suite: `python bench/run.py --help`."""

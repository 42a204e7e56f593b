"""`python -m specjax.bench`: measured against predicted speedup, and peers."""

"""What `python -m specjax.decode` runs: inputs, the decode job, its outputs."""

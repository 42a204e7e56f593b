"""TPU v4 speed without a TPU: the decode's compiled programs, their XLA cost analysis, a
roofline time per program, and the paper's speedups predicted from them
(`python -m specjax.plan --speed`)."""

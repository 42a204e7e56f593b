"""What a decode costs, measured or planned: the paper's costs c and v(K) timed where the
decode runs (timing.py, for `python -m specjax.bench` and `--gamma auto`), the memory plan
of the sharded programs (memory_plan.py, `python -m specjax.plan`), and TPU v4 speed
without a TPU: the decode's compiled programs, their XLA cost analysis, a roofline time
per program, and the paper's speedups predicted from them (`python -m specjax.plan
--speed`)."""

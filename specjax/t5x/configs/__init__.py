"""Gin files of the T5X route (`speculative.gin`, `demo_pair.gin`, `t5_1_1_xxl_small.gin`).

A package, so that gin finds `specjax/t5x/configs/NAME.gin` in the installed package from
any directory (gin reads a config path's folder as a Python package).
"""

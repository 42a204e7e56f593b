"""The decode core: loop state, the speculative and autoregressive steps, the one loop that
every driver runs, sampling, acceptance and the paper's formulas."""

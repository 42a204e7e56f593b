"""Meshes, T5X logical axis rules, the shardings of params, caches and state, and the
ahead-of-time memory plan."""

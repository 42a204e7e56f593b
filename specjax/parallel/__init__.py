"""Meshes, T5X logical axis rules, and the shardings of params, caches and state."""

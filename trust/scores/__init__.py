"""Trust scores: the pure formulas (scoring), the evidence behind a score, recompute, probation."""

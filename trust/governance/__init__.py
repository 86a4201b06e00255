"""What trust scores drive: Devil's Advocate, gaming flags, the living rubric, metrics."""

"""Statistics computed from raw records only (so every figure can be recomputed later)."""

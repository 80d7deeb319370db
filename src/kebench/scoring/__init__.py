"""Scoring helpers shared by editing, evaluation and stealthiness (design §5)."""

"""kvwise.core."""

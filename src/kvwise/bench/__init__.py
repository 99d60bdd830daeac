"""kvwise.bench."""

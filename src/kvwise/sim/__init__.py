"""kvwise.sim."""

"""kvwise.doctor."""

"""kvwise.gateway."""
